package redislane

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/scripts/lua"
)

// Attributes of the script spans: the semantic conventions' for database
// client spans, and lanes' own.
var (
	attrDBSystem    = attribute.String("db.system.name", "redis")
	attrDBOperation = attribute.Key("db.operation.name")
	attrDBNamespace = attribute.Key("db.namespace")
	attrServerAddr  = attribute.Key("server.address")
	attrServerPort  = attribute.Key("server.port")
	attrStatusCode  = attribute.Key("db.response.status_code")
	attrErrorType   = attribute.Key("error.type")
	attrScript      = attribute.Key("lanes.script")
)

// The commands that run a step, which name its span.
const (
	commandFCALL   = "FCALL"
	commandEVALSHA = "EVALSHA"
)

// command is the command that runs a step here: FCALL where the server has
// Functions (or it is not known yet), else EVALSHA.
func (b *Backend) command() string {
	if b.functions.Load() >= 0 {
		return commandFCALL
	}
	return commandEVALSHA
}

// startSpan starts the client span of one step, named after the command
// that runs it, a child of ctx's span.
func (b *Backend) startSpan(ctx context.Context, name string, keys []string) (context.Context, trace.Span, string) {
	cmd := b.command()
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, attrDBSystem, attrDBOperation.String(cmd), lanes.AttrNamespace.String(b.ns), attrScript.String(name))
	attrs = b.serverAttrs(ctx, keys, attrs)
	ctx, span := b.tracer.Start(ctx, cmd, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, span, cmd
}

// endSpan ends the span of a step that started as cmd: renamed if the step
// fell back to scripts meanwhile, and with error.type (and the Redis error
// code as db.response.status_code) when it failed.
func (b *Backend) endSpan(span trace.Span, cmd string, err error) {
	if now := b.command(); now != cmd {
		span.SetName(now)
		span.SetAttributes(attrDBOperation.String(now))
	}
	if err != nil {
		typ, code := redisErrorType(err)
		span.SetAttributes(attrErrorType.String(typ))
		if code != "" {
			span.SetAttributes(attrStatusCode.String(code))
		}
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// serverAttrs appends server.address, server.port and db.namespace (the
// database index) of the server that runs a step on keys: the client's
// for one server, the master of the namespace's slot on a cluster. A
// Sentinel client (its address changes with failovers) or another kind of
// client adds only what it can tell.
func (b *Backend) serverAttrs(ctx context.Context, keys []string, attrs []attribute.KeyValue) []attribute.KeyValue {
	var opt *redis.Options
	switch c := b.c.(type) {
	case *redis.Client:
		opt = c.Options()
	case *redis.ClusterClient:
		if len(keys) == 0 {
			return attrs
		}
		node, err := c.MasterForKey(ctx, keys[0])
		if err != nil {
			return attrs
		}
		opt = node.Options()
	default:
		return attrs
	}
	attrs = append(attrs, attrDBNamespace.String(strconv.Itoa(opt.DB)))
	if opt.Addr == "FailoverClient" { // go-redis's name for a Sentinel client's
		return attrs
	}
	if opt.Network == "unix" {
		return append(attrs, attrServerAddr.String(opt.Addr))
	}
	host, port, err := net.SplitHostPort(opt.Addr)
	if err != nil {
		return attrs
	}
	attrs = append(attrs, attrServerAddr.String(host))
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, attrServerPort.Int(p))
	}
	return attrs
}

// redisErrorType returns the error.type of a step's error and, for an
// error reply of Redis, its code (BUSY, NOSCRIPT, LANES_LIMIT...), which is
// also its type.
func redisErrorType(err error) (typ, code string) {
	var re redis.Error
	var ne net.Error
	switch {
	case errors.As(err, &re):
		code, _, _ = strings.Cut(re.Error(), " ")
		return code, code
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout", ""
	case errors.Is(err, context.Canceled):
		return "canceled", ""
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout", ""
	}
	return fmt.Sprintf("%T", err), ""
}

// IsCommand reports whether cmd is one a Backend sends to run a step: an
// FCALL of a function of lanes' library, an EVALSHA or EVAL of one of its
// scripts, or the FUNCTION LOAD of its library. Beside go-redis's redisotel
// tracing, whose span for each command would count every step a second
// time under the Backend's own span, give it as the filter:
//
//	redisotel.InstrumentTracing(rdb, redisotel.WithCommandFilter(func(cmd redis.Cmder) bool {
//		return redislane.IsCommand(cmd) || redisotel.DefaultCommandFilter(cmd)
//	}))
//
// Or keep redisotel's spans alone: redislane.WithTracerProvider with
// go.opentelemetry.io/otel/trace/noop's provider.
func IsCommand(cmd redis.Cmder) bool {
	args := cmd.Args()
	if len(args) < 2 {
		return false
	}
	arg := func(i int) string {
		if i >= len(args) {
			return ""
		}
		s, _ := args[i].(string)
		return s
	}
	known := ours()
	switch strings.ToLower(cmd.Name()) {
	case "fcall", "fcall_ro":
		return strings.HasPrefix(arg(1), known.library+"_")
	case "evalsha", "evalsha_ro":
		return slices.Contains(known.hashes, strings.ToLower(arg(1)))
	case "eval", "eval_ro":
		return slices.Contains(known.sources, arg(1))
	case "function":
		return strings.EqualFold(arg(1), "load") && strings.HasPrefix(arg(len(args)-1), "#!lua name="+known.library+"\n")
	}
	return false
}

// ours are the names, digests and sources of lanes' scripts and library.
var ours = sync.OnceValue(func() (k struct {
	library         string
	hashes, sources []string
}) {
	k.library, _ = lua.Library()
	for _, s := range lua.Scripts {
		src := lua.Source(s)
		sum := sha1.Sum([]byte(src))
		k.hashes = append(k.hashes, hex.EncodeToString(sum[:]))
		k.sources = append(k.sources, src)
	}
	return k
})
