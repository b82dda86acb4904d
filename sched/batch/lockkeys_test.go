package batch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// lockKeysOf returns the LockKeys of a tool declaring templates, with
// workspace as the workspace.
func lockKeysOf(t *testing.T, workspace string, templates ...string) sched.LockKeysFunc {
	t.Helper()
	q := make([]string, len(templates))
	for i, s := range templates {
		q[i] = fmt.Sprintf("%q", s)
	}
	src := fmt.Sprintf("[runner]\nworkspace = %q\n[tools.w]\ncommand = [\"true\"]\nlock_keys = [%s]\n", workspace, strings.Join(q, ", "))
	return parse(t, src, "").Tools["w"].LockKeys
}

func TestLockKeysTemplates(t *testing.T) {
	ws := realDir(t, t.TempDir())
	keys := lockKeysOf(t, ws, "file:{path}", "draft:{id}", "doc:{kind}/{id}", "constant")
	for _, tt := range []struct {
		args    string
		want    []string
		wantErr string
	}{
		{`{"path": "a/b.txt", "id": "d1", "kind": "rfd"}`, []string{"file:" + filepath.Join(ws, "a/b.txt"), "draft:d1", "doc:rfd/d1", "constant"}, ""},
		{`{"path": "/abs/x", "id": 7, "kind": "rfd"}`, []string{"file:/abs/x", "draft:7", "doc:rfd/7", "constant"}, ""},
		{`{"path": "x", "id": 1.5e3, "kind": "k"}`, []string{"file:" + filepath.Join(ws, "x"), "draft:1500", "doc:k/1500", "constant"}, ""},
		{`{"path": "x", "id": 7.0, "kind": "k"}`, []string{"file:" + filepath.Join(ws, "x"), "draft:7", "doc:k/7", "constant"}, ""},
		{`{"path": "x", "id": 0.25, "kind": "k"}`, []string{"file:" + filepath.Join(ws, "x"), "draft:0.25", "doc:k/0.25", "constant"}, ""},
		{`{"path": "x", "kind": "k"}`, nil, `argument "id" is missing`},
		{`{"path": "x", "id": true, "kind": "k"}`, nil, `argument "id" is a boolean, not a string or a number`},
		{`{"path": "x", "id": null, "kind": "k"}`, nil, `argument "id" is null, not a string or a number`},
		{`{"path": {"p": 1}, "id": 1, "kind": "k"}`, nil, `argument "path" is an object`},
		{`{"path": "", "id": 1, "kind": "k"}`, nil, `empty file path`},
		{`["x"]`, nil, "not a JSON object"},
		{`null`, nil, "not a JSON object"},
	} {
		got, err := keys(context.Background(), json.RawMessage(tt.args))
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("LockKeys(%s) = %q, %v; want an error containing %q", tt.args, got, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || !reflect.DeepEqual(got, tt.want)):
			t.Errorf("LockKeys(%s) = %q, %v; want %q", tt.args, got, err, tt.want)
		}
	}
}

// TestLockKeysFileThroughSymlink checks that a path through a symlinked
// directory gives the key of the real path.
func TestLockKeysFileThroughSymlink(t *testing.T) {
	ws := realDir(t, t.TempDir())
	if err := os.Mkdir(filepath.Join(ws, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	keys := lockKeysOf(t, ws, "file:{path}")
	var got []string
	for _, p := range []string{"real/f.txt", "link/f.txt", "./link/../real/f.txt", filepath.Join(ws, "link", "f.txt")} {
		k, err := keys(context.Background(), json.RawMessage(fmt.Sprintf(`{"path": %q}`, p)))
		if err != nil || len(k) != 1 {
			t.Fatalf("LockKeys(%s) = %q, %v", p, k, err)
		}
		got = append(got, k[0])
	}
	want := "file:" + filepath.Join(ws, "real", "f.txt")
	for i, k := range got {
		if k != want {
			t.Errorf("key %d = %q; want %q for every spelling", i, k, want)
		}
	}
}

// TestLockKeysErrorFailsOnlyThatCall runs two calls of a tool with a lock
// key template: the one without the argument fails with "could not tell
// what the call changes", the other runs.
func TestLockKeysErrorFailsOnlyThatCall(t *testing.T) {
	cfg := parse(t, "[tools.w]\ncommand = [\"cat\"]\nlock_keys = [\"draft:{id}\"]\n", "")
	sess, err := lanes.NewSession(context.Background(), lanes.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	s, err := sched.New(cfg, sess)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the bodies end with it, so Wait returns
	defer cancel()
	res, err := s.Run(ctx, []sched.Call{
		{ID: "c1", Tool: "w", Args: json.RawMessage(`{"title": "x"}`)},
		{ID: "c2", Tool: "w", Args: json.RawMessage(`{"id": 42}`)},
	}, sched.Options{})
	s.Wait()
	if err != nil {
		t.Fatalf("Run() = %v", err)
	}
	o1, o2 := res.Outcomes[0], res.Outcomes[1]
	if want := `could not tell what the call changes: argument "id" is missing`; o1.Status != sched.Failed || o1.Err == nil || o1.Err.Error() != want {
		t.Errorf("c1 = %s, %v; want error %q", o1.Status, o1.Err, want)
	}
	if o2.Status != sched.OK || o2.Output != `{"id": 42}` || o2.Tokens["lock:draft:42"] == 0 {
		t.Errorf("c2 = %s %q tokens %v (%v); want ok, its arguments echoed, a token for lock:draft:42", o2.Status, o2.Output, o2.Tokens, o2.Err)
	}
}
