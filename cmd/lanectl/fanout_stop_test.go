package main

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
)

// The tests of this file check DESIGN.md section 5, rule 9: with
// fan_out.on_error = "stop", no further operation of a call starts after
// one failed, also across a restart: an operation found in flight by a
// restart with the same run id ends indeterminate, a failure, and the
// later operations end never_dispatched (they ran; found by a review).
// (An operation whose lease is released by force hands its lanes on at
// once, before its failure is known: README says so.)

// fanOpScript logs "start CALL OP" to $1, then blocks (exec sleep 60, its
// pid in $2) when the operation's arguments hold "slow", else prints "did
// OP".
const fanOpScript = `a=$(cat); echo "start $LANES_CALL_ID $LANES_OPERATION" >> "$1"
case "$a" in *slow*) echo $$ > "$2"; exec sleep 60;; esac
echo "did $LANES_OPERATION"`

func fanStopDir(t *testing.T) (d *batchDir, log, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	log, pidFile = filepath.Join(dir, "exec.log"), filepath.Join(dir, "slow.pid")
	d = newBatchDir(t, fmt.Sprintf(`
[tools.del]
command = ["sh", "-c", %q, "sh", %q, %q]
fan_out = { enabled = true, on_error = "stop" }
concurrency = 1
`, fanOpScript, log, pidFile))
	return d, log, pidFile
}

const fanStopArgs = `[{"p":"a"},{"p":"b"},{"p":"slow"},{"p":"d"}]`

// checkFourthNeverStarted fails t unless operation 3 of c1 never ran and
// its outcome says so.
func checkFourthNeverStarted(t *testing.T, got []batchJSON, log string) {
	t.Helper()
	if n := countLines(t, log, "start c1 3"); n != 0 {
		t.Errorf("operation c1#3 started %d times after c1#2 failed (log %q); want never: fan_out.on_error is stop", n, logLines(t, log))
	}
	if len(got) != 1 || len(got[0].Operations) != 4 {
		t.Fatalf("outcomes = %+v; want one call of four operations", got)
	}
	if op := got[0].Operations[2]; op.Status != "indeterminate" {
		t.Errorf("c1#2 = %s (%q); want indeterminate", op.Status, op.Error)
	}
	if op := got[0].Operations[3]; op.Status != "never_dispatched" {
		t.Errorf("c1#3 = %s (%q); want never_dispatched (an earlier operation of call c1 failed)", op.Status, op.Output)
	}
}

// TestBatchFanOutStopRestartedAfterKillStartsNoFurtherOperation: the batch
// is killed (SIGKILL) while c1#2 runs; started again with the same run id,
// it reports c1#0 and c1#1 from the store, c1#2 indeterminate (in flight
// when its process died), and must not start c1#3 (it did). On miniredis
// and real Redis.
func TestBatchFanOutStopRestartedAfterKillStartsNoFurtherOperation(t *testing.T) {
	forEachServer(t, func(t *testing.T, s *server) {
		d, log, pidFile := fanStopDir(t)
		args := s.args("batch", "--json", "--ttl", "1s", "--run-id", "fan-stop", "--tools", d.tools, "--calls", d.calls(t, "anthropic", toolCall{"c1", "del", fanStopArgs}))
		first := startBin(t, args...)
		eventually(t, "c1#2 runs", func() bool { return pidIn(pidFile) > 0 })
		t.Cleanup(func() { _ = syscall.Kill(pidIn(pidFile), syscall.SIGKILL) })
		first.signal(t, syscall.SIGKILL)
		first.wait(t)
		eventually(t, "the killed batch's tool is gone with it", func() bool { return deadOrZombie(pidIn(pidFile)) })
		code, out, stderr := runBin(t, args...)
		if code != 0 {
			t.Fatalf("restarted batch = %d: %s", code, stderr)
		}
		checkFourthNeverStarted(t, decodeBatch(t, out), log)
		s.assertEmpty(t)
	})
}
