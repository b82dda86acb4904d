// Package mcptools puts lanes where tool calls flow through the Model
// Context Protocol, with the official Go SDK
// (github.com/modelcontextprotocol/go-sdk):
//
//   - Connect is a batch.Connector: the [mcp_servers.NAME] of a
//     configuration become tool sources, every tool a server lists a tool
//     of the batch, each call a tools/call whose request _meta carries the
//     call's fencing tokens (MetaTokens).
//   - Proxy is an MCP server (`lanectl mcp serve`) that offers the tools of
//     a configuration, commands and MCP servers' tools alike, and runs every
//     tools/call it receives through the lanes of its Session's namespace,
//     shared by every replica of the proxy.
//
// Package sched/batch knows tool sources only through its ToolServer and
// Connector interfaces, so that a program that reads configurations
// without MCP servers builds no MCP client in; this package is the one
// that imports the SDK.
package mcptools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// MetaTokens is the key, in the _meta of a tools/call request, of the
// call's fencing tokens: an object from lane key (tenant:, tool:,
// concurrency:, lock:) to token, a JSON number. A server that keeps state
// can refuse a request whose token for a key is below one it has seen.
const MetaTokens = "lanes/tokens"

// Bounds of a connection to a server.
const (
	// CloseGrace is how long a server started with a command has to exit
	// once its standard input is closed, before it gets SIGTERM (and as
	// long again before SIGKILL).
	CloseGrace = 2 * time.Second
	// StderrTail is how much of the end of a server's standard error the
	// error of a server that failed to start reports.
	StderrTail = 1 << 10
)

// Connector connects to MCP servers. Its zero value is ready to use.
type Connector struct {
	// Stderr receives what a server started with a command writes to its
	// standard error, each line prefixed with "[NAME] "; nil drops it.
	// The end of it is kept anyway, for the error of a failed start.
	Stderr io.Writer
	// HTTPClient reaches the servers with a url; nil means
	// http.DefaultClient.
	HTTPClient *http.Client
	// Version is the version the client gives the servers in initialize
	// (clientInfo.version): the program's. Empty means ModuleVersion.
	Version string
}

// Connect connects to s with the zero Connector: see Connector.Connect.
// It is a batch.Connector.
func Connect(ctx context.Context, s batch.MCPServer) (batch.ToolServer, error) {
	return Connector{}.Connect(ctx, s)
}

var _ batch.Connector = Connect

// Connect starts s's command and speaks MCP to it on its standard input
// and output, or reaches s's URL over streamable HTTP; initializes the
// session, and lists every tool of the server (following tools/list's
// pages). ctx bounds all of that, not the session. The command runs in
// s.Dir with this process's environment and s.Env.
//
// Its error says what failed in one line: the start (a program not found,
// a server that exited, with the end of its standard error), initialize,
// or tools/list. What it started is stopped again then.
//
// The returned server's tools call it with tools/call: the call's
// arguments, and its fencing tokens in _meta (MetaTokens). The result's
// text content, one part a line, is the outcome's output, and a result
// with isError makes the call fail with that text; a result with no text
// gives its structured content as JSON. When the call's context ends (its
// timeout, a cancelled batch, a lost lease), the request is cancelled and
// the server sent notifications/cancelled; the body returns then, and the
// call's lanes pass on: a server that goes on regardless is out of lanes'
// reach, which is what the fencing tokens are for.
func (c Connector) Connect(ctx context.Context, s batch.MCPServer) (batch.ToolServer, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "lanes", Version: orModuleVersion(c.Version)}, &mcp.ClientOptions{Logger: discard})
	var (
		t      mcp.Transport
		cmd    *exec.Cmd
		stderr = &tail{max: StderrTail}
	)
	switch {
	case len(s.Command) > 0:
		cmd = exec.Command(s.Command[0], s.Command[1:]...)
		cmd.Dir = s.Dir
		cmd.Env = environ(os.Environ(), s.Env)
		cmd.Stderr = stderr
		if c.Stderr != nil {
			cmd.Stderr = io.MultiWriter(stderr, &linePrefixer{w: c.Stderr, prefix: "[" + s.Name + "] "})
		}
		cmd.WaitDelay = time.Second // a child of the server that keeps its stderr open
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: CloseGrace}
	case s.URL != "":
		t = &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: c.HTTPClient, DisableStandaloneSSE: true}
	default:
		return nil, errors.New("neither a command nor a url to reach it by")
	}
	cs, err := client.Connect(ctx, t, nil)
	if err != nil {
		return nil, startError(ctx, s, cmd, stderr, err)
	}
	srv := &server{name: s.Name, cs: cs}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			cs.Close()
			if ctx.Err() != nil {
				err = context.Cause(ctx)
			}
			return nil, fmt.Errorf("tools/list: %v", oneLine(err.Error()))
		}
		def, err := json.Marshal(tool)
		if err != nil {
			cs.Close()
			return nil, fmt.Errorf("tools/list: tool %q: %v", tool.Name, err)
		}
		rt := batch.RemoteTool{Name: tool.Name, Definition: def, Run: srv.body(tool.Name)}
		if a := tool.Annotations; a != nil {
			rt.ReadOnlyHint, rt.IdempotentHint = a.ReadOnlyHint, a.IdempotentHint
		}
		srv.tools = append(srv.tools, rt)
	}
	return srv, nil
}

// startError says why s did not start: the command's own error (not
// found), or how it ended and the end of its standard error, or the
// session's error.
func startError(ctx context.Context, s batch.MCPServer, cmd *exec.Cmd, stderr *tail, err error) error {
	if ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if cmd == nil {
		return fmt.Errorf("cannot reach %s: %v", s.URL, oneLine(err.Error()))
	}
	if cmd.Process == nil { // never started
		var ee *exec.Error
		var pe *fs.PathError
		switch {
		case errors.As(err, &ee):
			err = ee.Err
		case errors.As(err, &pe):
			err = pe.Err
		}
		return fmt.Errorf("cannot start %s: %v", s.Command[0], oneLine(err.Error()))
	}
	msg := fmt.Sprintf("%s did not answer initialize: %v", s.Command[0], oneLine(err.Error()))
	if ps := cmd.ProcessState; ps != nil {
		msg = fmt.Sprintf("%s exited before it answered initialize (%v)", s.Command[0], ps)
	}
	if t := stderr.String(); t != "" {
		msg += ": " + t
	}
	return errors.New(msg)
}

// server is a connected MCP server: a batch.ToolServer.
type server struct {
	name  string
	cs    *mcp.ClientSession
	tools []batch.RemoteTool
}

func (s *server) Tools() []batch.RemoteTool { return slices.Clone(s.tools) }

// Close ends the session: a server started with a command has its
// standard input closed, and CloseGrace to exit before SIGTERM. How it
// exited is its own business.
func (s *server) Close() error {
	err := s.cs.Close()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil
	}
	return err
}

// body returns the sched.Body that calls the server's tool remote.
func (s *server) body(remote string) sched.Body {
	return func(ctx context.Context, inv sched.Invocation) (string, error) {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("%w: not sent (%v)", err, context.Cause(ctx))
		}
		args := inv.Args
		if len(bytes.TrimSpace(args)) == 0 {
			args = json.RawMessage(`{}`)
		}
		params := &mcp.CallToolParams{Name: remote, Arguments: args, Meta: mcp.Meta{MetaTokens: tokensMeta(inv.Tokens)}}
		res, err := s.cs.CallTool(ctx, params)
		if slot, ok := ctx.Value(resultKey{}).(*resultSlot); ok {
			slot.set(res, err)
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return "", fmt.Errorf("%w: cancelled; MCP server %s was sent notifications/cancelled (%v)", ctx.Err(), s.name, context.Cause(ctx))
		case err != nil:
			return "", fmt.Errorf("MCP server %s: tools/call %s: %v", s.name, remote, oneLine(err.Error()))
		case res.IsError:
			out := resultText(res)
			if out == "" {
				out = "the tool reported an error (isError) without saying why"
			}
			return "", errors.New(out)
		}
		return resultText(res), nil
	}
}

// tokensMeta is the value of MetaTokens for tokens.
func tokensMeta(tokens map[string]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(tokens))
	for k, t := range tokens {
		out[k] = t
	}
	return out
}

// resultText is a result's text content, one part a line; other kinds of
// content are named in brackets. A result with no content gives its
// structured content as JSON.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, "[resource "+c.URI+"]")
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				parts = append(parts, c.Resource.Text)
			} else if c.Resource != nil {
				parts = append(parts, "[resource "+c.Resource.URI+"]")
			}
		default:
			parts = append(parts, fmt.Sprintf("[%T]", c))
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return string(b)
		}
	}
	return strings.Join(parts, "\n")
}

// resultKey is the context key of a *resultSlot: where a body leaves the
// server's whole result for the Proxy, which passes it on.
type resultKey struct{}

// resultSlot keeps the result of the last tools/call of a call.
type resultSlot struct {
	mu  sync.Mutex
	res *mcp.CallToolResult
	err error
}

func (s *resultSlot) set(res *mcp.CallToolResult, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res, s.err = res, err
}

func (s *resultSlot) get() *mcp.CallToolResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil
	}
	return s.res
}

// environ returns base with env's variables in place of any of the same
// name.
func environ(base []string, env map[string]string) []string {
	out := make([]string, 0, len(base)+len(env))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := env[name]; !ok {
			out = append(out, kv)
		}
	}
	for name, v := range env {
		out = append(out, name+"="+v)
	}
	return out
}

// discard is the logger of the SDK's clients and servers here: lanes
// reports what matters itself.
var discard = slog.New(slog.DiscardHandler)

// oneLine returns s on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ToValidUTF8(s, "\uFFFD")), " ")
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// String returns the kept bytes on one line.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	return oneLine(string(b))
}

// linePrefixer writes each line written to it to w with prefix before it.
type linePrefixer struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  string
	partial []byte
}

func (l *linePrefixer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := append([]byte(l.prefix), l.partial[:i+1]...)
		l.partial = l.partial[i+1:]
		if _, err := l.w.Write(line); err != nil {
			return len(p), nil // the server's stderr is not worth failing it for
		}
	}
	if len(l.partial) > 64<<10 { // a line without end: pass it on as it is
		_, _ = l.w.Write(append([]byte(l.prefix), append(l.partial, '\n')...))
		l.partial = l.partial[:0]
	}
	return len(p), nil
}
