package redislane

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/scripts/lua"
)

var recordScript = redis.NewScript(lua.Source("record.lua"))

var _ lanes.RunStore = (*Backend)(nil)

// runKey is the hash of run's records: <prefix>:{ns}:run:<run>.
func (b *Backend) runKey(run string) string {
	return strings.TrimSuffix(b.keys[0], "entries") + "run:" + run
}

// Record implements lanes.RunStore in one round trip (record.lua).
func (b *Backend) Record(ctx context.Context, owner string, ids []string, run, call string, value []byte, retention time.Duration) (lanes.Released, error) {
	if err := lanes.ValidateRecord(run, call, value, retention); err != nil {
		return lanes.Released{}, err
	}
	if err := lanes.ValidateIDs(ids); err != nil {
		return lanes.Released{}, err
	}
	args := make([]any, 0, len(ids)+6)
	args = append(args, Protocol, b.wake, owner, call, value, retention.Milliseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := b.runKeys(ctx, recordScript, "record", append(b.Keys(), b.runKey(run)), args)
	if err != nil {
		return lanes.Released{}, b.mapErr(err)
	}
	return parseReleased(v, len(ids))
}

// Records implements lanes.RunStore in one round trip (HGETALL).
func (b *Backend) Records(ctx context.Context, run string) (map[string][]byte, error) {
	if err := lanes.ValidateEntryID(run); err != nil {
		return nil, err
	}
	m, err := b.c.HGetAll(ctx, b.runKey(run)).Result()
	if err != nil {
		return nil, b.mapErr(err)
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out, nil
}
