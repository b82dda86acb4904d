// Command server is the MCP server of the tests of sched/mcptools and
// `lanectl mcp`, built with the official Go SDK: the kind of server lanes
// puts its lanes in front of. It serves on standard input and output, or
// over streamable HTTP with --http ADDR (it then prints its endpoint,
// http://ADDR/mcp, as its first line on standard output).
//
// Its tools, each of which may first wait for a gate file (until: a path
// the test creates when the call may go on):
//
//	read   {path}                  readOnlyHint: the file's content
//	append {path, text, until}     appends text and a newline to the file
//	slow   {label, ms, until}      sleeps ms milliseconds
//	fail   {why}                   an isError result saying why
//
// Every call of append and slow writes lines to --log, one write each, in
// the order they happen: "start LABEL TOKENS", then "end LABEL" or
// "cancelled LABEL" (append's label is its text), where TOKENS is the
// JSON of the lanes/tokens of the request's _meta ({} when none).
//
// --fail-start MSG makes a server that exits at once, MSG on its standard
// error; --fail-list MSG one that answers tools/list with the error MSG.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mcptest server:", err)
		os.Exit(1)
	}
}

func run() error {
	root := flag.String("root", ".", "directory the file tools work in")
	logPath := flag.String("log", "", "file the tools log their start and end to")
	httpAddr := flag.String("http", "", "serve streamable HTTP on this address instead of standard input and output")
	failStart := flag.String("fail-start", "", "write this to standard error and exit 3 at once: a server that cannot start")
	failList := flag.String("fail-list", "", "answer tools/list with this error: a server that cannot list its tools")
	flag.Parse()
	if *failStart != "" {
		fmt.Fprintln(os.Stderr, *failStart)
		os.Exit(3)
	}
	t := &tools{root: *root}
	if *logPath != "" {
		f, err := os.OpenFile(*logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		t.log = f
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, nil)
	t.add(server)
	if *failList != "" {
		server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if method == "tools/list" {
					return nil, errors.New(*failList)
				}
				return next(ctx, method, req)
			}
		})
	}
	if *httpAddr == "" {
		return server.Run(context.Background(), &mcp.StdioTransport{})
	}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return err
	}
	fmt.Printf("http://%s/mcp\n", ln.Addr())
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	return http.Serve(ln, h)
}

type tools struct {
	root string
	mu   sync.Mutex // one log line at a time
	log  *os.File
}

func (t *tools) logf(format string, a ...any) {
	if t.log == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.log, format+"\n", a...)
}

// tokens returns the JSON of the request's lanes/tokens.
func tokens(req *mcp.CallToolRequest) string {
	v, ok := req.Params.Meta["lanes/tokens"]
	if !ok {
		return "{}"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// gate waits until the file path exists ("" means no gate) or ctx ends.
func gate(ctx context.Context, path string) error {
	if path == "" {
		return nil
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

type (
	readArgs struct {
		Path string `json:"path"`
	}
	appendArgs struct {
		Path  string `json:"path"`
		Text  string `json:"text"`
		Until string `json:"until,omitempty"`
	}
	slowArgs struct {
		Label string `json:"label"`
		MS    int    `json:"ms"`
		Until string `json:"until,omitempty"`
	}
	failArgs struct {
		Why string `json:"why"`
	}
)

func (t *tools) add(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "read", Description: "Read a file", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, a readArgs) (*mcp.CallToolResult, any, error) {
			b, err := os.ReadFile(filepath.Join(t.root, a.Path))
			if err != nil {
				return nil, nil, err
			}
			return text(string(b)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "append", Description: "Append a line to a file"},
		func(ctx context.Context, req *mcp.CallToolRequest, a appendArgs) (*mcp.CallToolResult, any, error) {
			t.logf("start %s %s", a.Text, tokens(req))
			if err := gate(ctx, a.Until); err != nil {
				t.logf("cancelled %s", a.Text)
				return nil, nil, err
			}
			f, err := os.OpenFile(filepath.Join(t.root, a.Path), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return nil, nil, err
			}
			_, err = f.WriteString(a.Text + "\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			t.logf("end %s", a.Text)
			if err != nil {
				return nil, nil, err
			}
			return text("appended " + a.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "slow", Description: "Sleep, logging the start and the end"},
		func(ctx context.Context, req *mcp.CallToolRequest, a slowArgs) (*mcp.CallToolResult, any, error) {
			t.logf("start %s %s", a.Label, tokens(req))
			err := gate(ctx, a.Until)
			if err == nil {
				timer := time.NewTimer(time.Duration(a.MS) * time.Millisecond)
				select {
				case <-timer.C:
				case <-ctx.Done():
					err = ctx.Err()
				}
				timer.Stop()
			}
			if err != nil {
				t.logf("cancelled %s", a.Label)
				return nil, nil, err
			}
			t.logf("end %s", a.Label)
			return text("slept " + a.Label), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Fail, saying why", Annotations: &mcp.ToolAnnotations{IdempotentHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, a failArgs) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New(a.Why)
		})
}
