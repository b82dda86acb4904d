package main

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// deafBackend drops every hint: its owner hears of a change only from its
// own steps.
type deafBackend struct{ lanes.Backend }

func (deafBackend) Subscribe(context.Context, string, func([]lanes.Hint)) (func(), error) {
	return func() {}, nil
}

// TestLockFinishForcedReleaseSaysSo: when the hint of a forced release
// comes too late (here: never) and the command exits first, lock's own
// release is what learns it; lock then says the same as when the hint
// came first (TestLockLeaseLost), and exits 79, not with the command's 0
// and no word. In process, on the memory backend: the release path, not
// the hint, is what is tested.
func TestLockFinishForcedReleaseSaysSo(t *testing.T) {
	ctx := context.Background()
	m := lanes.NewMemory()
	sess, err := lanes.NewSession(ctx, deafBackend{m}, lanes.WithTTL(time.Minute), lanes.WithHeartbeat(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	lease, err := sess.Acquire(ctx, lanes.Request{ID: "e1", Lanes: []lanes.Lane{{Key: "k", Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Release(ctx, "", []string{"e1"}); err != nil { // lanectl release --force e1
		t.Fatal(err)
	}
	child := exec.Command("true")
	waitErr := child.Run()
	o := &lockOptions{global: &globalOptions{}, keys: []string{"k"}}
	var stderr bytes.Buffer
	err = o.finish(ctx, &stderr, lease, child, waitErr, "")
	want := "lease lost on k: entry e1 was released by force (lanectl release --force) before its holder released it; the command had already exited with status 0"
	ee, ok := err.(*exitError)
	if !ok || ee.code != exitLeaseLost || ee.err == nil || ee.err.Error() != want || stderr.Len() != 0 {
		t.Fatalf("finish() = %v (stderr %q); want exit %d: %s", err, stderr.String(), exitLeaseLost, want)
	}
}
