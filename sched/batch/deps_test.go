package batch_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The MCP SDK stays out of the library's core: sched/batch knows MCP
// servers only through its Connector and ToolServer interfaces, and
// sched/mcptools alone imports the SDK. A program built on these packages
// without sched/mcptools builds no MCP code in.
func TestCorePackagesDoNotImportTheMCPSDK(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the packages' dependencies")
	}
	pkgs := []string{"lanes", "redislane", "fencing", "sched", "sched/batch"}
	args := []string{"list", "-deps"}
	for _, p := range pkgs {
		args = append(args, "github.com/lanes-dev/lanes/"+p)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/modelcontextprotocol/") {
			t.Errorf("%v depend on %s; want the MCP SDK only in sched/mcptools", pkgs, dep)
		}
	}
}
