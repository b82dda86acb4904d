package replyoracle_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibraryFreeOfSDKs: no package of the module but these tests imports
// the providers' SDKs: what a user builds (the library, lanectl) carries
// none of them.
func TestLibraryFreeOfSDKs(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the packages' dependencies")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/lanes-dev/lanes/...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/anthropics/") || strings.HasPrefix(p, "github.com/openai/") {
			t.Errorf("a package of lanes depends on %s; the SDKs are for tests only", p)
		}
	}
}
