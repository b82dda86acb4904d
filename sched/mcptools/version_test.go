package mcptools_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lanes-dev/lanes/sched/batch"
	"github.com/lanes-dev/lanes/sched/mcptools"
)

// (Found by an outside trial.) The proxy's serverInfo.version, and the
// clientInfo.version the Connector gives MCP servers, were the literal "1".
// They are now the version the program names (lanectl passes its own),
// else the lanes module's as the build recorded it, else "devel". No
// Redis: in-memory lanes, and an SDK server in this process.
func TestProxyServerInfoVersion(t *testing.T) {
	f := newFixture(t)
	r := f.mustResolve(t, "")
	for _, tt := range []struct{ given, want string }{
		{"v1.2.3", "v1.2.3"},
		{"", mcptools.ModuleVersion()},
	} {
		p, _ := newProxy(t, r, nil, mcptools.ProxyOptions{Version: tt.given})
		cs := connect(t, p)
		info := cs.InitializeResult().ServerInfo
		if info.Name != "lanes" || info.Version != tt.want {
			t.Errorf("with Version %q, serverInfo = %+v; want lanes, version %q", tt.given, info, tt.want)
		}
	}
	if v := mcptools.ModuleVersion(); v == "" || v == "1" {
		t.Errorf("ModuleVersion() = %q; want the module's version or devel", v)
	}
}

func TestConnectorClientInfoVersion(t *testing.T) {
	for _, tt := range []struct{ given, want string }{
		{"v1.2.3", "v1.2.3"},
		{"", mcptools.ModuleVersion()},
	} {
		server := mcp.NewServer(&mcp.Implementation{Name: "probe", Version: "0"}, nil)
		srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		ts, err := mcptools.Connector{Version: tt.given}.Connect(ctx, batch.MCPServer{Name: "probe", URL: srv.URL})
		cancel()
		if err != nil {
			srv.Close()
			t.Fatalf("Connect() = %v", err)
		}
		var got []string
		for ss := range server.Sessions() {
			if p := ss.InitializeParams(); p != nil && p.ClientInfo != nil {
				got = append(got, p.ClientInfo.Name+" "+p.ClientInfo.Version)
			}
		}
		ts.Close()
		srv.Close()
		if len(got) != 1 || got[0] != "lanes "+tt.want {
			t.Errorf("with Version %q, the server saw clientInfo %q; want [lanes %s]", tt.given, got, tt.want)
		}
	}
}
