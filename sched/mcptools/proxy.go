package mcptools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
	"github.com/lanes-dev/lanes/sched/batch"
)

// TenantHeader is the HTTP header by which a client of a Proxy served
// over streamable HTTP names the tenant of its calls (the per_tenant
// lane). An MCP client configured with a header sends it with every
// request of its session.
const TenantHeader = "Lanes-Tenant"

// Result _meta keys: what the lanes made of a call, on every result the
// Proxy returns.
const (
	MetaStatus = "lanes/status" // the sched.Status of the call
	MetaCode   = "lanes/code"   // its sched.Code, when not ok
)

// ProxyOptions are the settings of a Proxy.
type ProxyOptions struct {
	// Tenant is the tenant of the calls of a session that names none (by
	// TenantHeader); empty takes no tenant lane.
	Tenant string
	// Wait bounds how long a call waits for its lanes (sched.Options.Wait):
	// past it the client gets an isError result saying so. 0 means as long
	// as the client waits.
	Wait time.Duration
	// OnCall, when set, is told each call's outcome once it settled.
	OnCall func(CallOutcome)
	// CallContext, when set, returns the context a call runs under from
	// the request's: to add what its tool's body reads there (such as
	// batch.WithNamespace for a command's LANES_NAMESPACE).
	CallContext func(context.Context) context.Context
	// Version is the version the proxy gives its clients in initialize
	// (serverInfo.version): the program's, such as lanectl's. Empty means
	// ModuleVersion.
	Version string
}

// CallOutcome is one call a Proxy ran, for OnCall.
type CallOutcome struct {
	RequestID string // the MCP request id, as the call id of its lanes entry
	Tenant    string
	Outcome   sched.Outcome
}

// Proxy is an MCP server offering the tools of a resolved configuration:
// its commands and the tools of its MCP servers. It runs each tools/call
// it receives as a batch of one call through a sched.Scheduler on its
// Session, so that every replica of the proxy whose Session shares a
// namespace shares the lanes: tenant, tool, concurrency keys, and lock
// keys from the arguments. A call's entry is mcp-RANDOM/REQUEST-ID, its
// call id the MCP request id (what `lanectl status` shows beside the
// tool). An MCP server's tool receives the call's fencing tokens in the
// request's _meta (MetaTokens).
//
// A call the lanes refuse (a wait longer than Wait, a lock cycle, a limit
// that disagrees with another replica's) gets an isError result saying
// why, never a wait without end; so does a call that fails, times out or
// is cut off. A call the client cancels (notifications/cancelled) leaves
// its queues, or has its tools/call to the server cancelled in turn.
type Proxy struct {
	s       *sched.Scheduler
	o       ProxyOptions
	server  *mcp.Server
	seq     atomic.Uint64
	skipped []string
	tools   []string
	calls   sync.WaitGroup // the handlers running
	stop    context.Context
	close   context.CancelCauseFunc
}

// NewProxy returns a Proxy for res's tools on session; res stays the
// caller's to close, once the Proxy served its last call. Its error wraps
// sched.ErrConfig for a configuration or options it cannot serve.
//
// A tool of res whose description the SDK refuses (an input schema that
// is not of type object) is left out, and said so by Skipped; disabled
// tools are not offered. The proxy's own calls are never run again by run
// id, so give it a Session whose backend keeps no run records
// (WithoutRecords), or each call's outcome is kept for the runner's
// retention for nothing.
func NewProxy(res *batch.Resolved, session *lanes.Session, o ProxyOptions) (*Proxy, error) {
	if o.Wait < 0 {
		return nil, fmt.Errorf("%w: wait is negative (%v)", sched.ErrConfig, o.Wait)
	}
	if o.Tenant != "" {
		if err := validTenant(o.Tenant); err != nil {
			return nil, fmt.Errorf("%w: tenant: %w", sched.ErrConfig, err)
		}
	}
	s, err := sched.New(res.Config, session)
	if err != nil {
		return nil, err
	}
	p := &Proxy{s: s, o: o}
	p.stop, p.close = context.WithCancelCause(context.Background())
	p.server = mcp.NewServer(&mcp.Implementation{Name: "lanes", Title: "lanes proxy", Version: orModuleVersion(o.Version)},
		&mcp.ServerOptions{Logger: discard, Capabilities: &mcp.ServerCapabilities{
			// Tools, even before any is added; no logging (deprecated, and
			// the proxy sends no log messages).
			Tools: &mcp.ToolCapabilities{ListChanged: true},
		}})
	names := make([]string, 0, len(res.Tools))
	for n := range res.Tools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t := res.Config.Tools[name]
		if t.Disabled {
			continue
		}
		if err := p.add(name, res.Tools[name], t); err != nil {
			p.skipped = append(p.skipped, fmt.Sprintf("tool %s left out: %v", name, err))
			continue
		}
		p.tools = append(p.tools, name)
	}
	return p, nil
}

// errProxyClosed is the cause that ends the calls of a closed Proxy.
var errProxyClosed = errors.New("the proxy is shutting down")

// Close ends every call in flight as its client's cancel would (a waiting
// call leaves its queues, a running one has its tools/call cancelled) and
// answers later calls with an isError result. Wait then returns once they
// ended. It is for a proxy stopped with calls in flight: over HTTP, a
// session's calls do not end with the server.
func (p *Proxy) Close() { p.close(errProxyClosed) }

// Tools returns the names of the tools the proxy offers, sorted.
func (p *Proxy) Tools() []string { return append([]string(nil), p.tools...) }

// Skipped says, one line each, which tools the proxy could not offer.
func (p *Proxy) Skipped() []string { return append([]string(nil), p.skipped...) }

// Wait blocks until every call the proxy received has ended, and every
// tool body a call stopped waiting for (cut off by its timeout or by the
// client) has returned and released its lanes. Call it once the proxy
// stopped serving: the calls of a client that went away are cancelled
// then.
func (p *Proxy) Wait() {
	p.calls.Wait()
	p.s.Wait()
}

// ServeStdio serves one client on in and out, the standard input and
// output of a proxy the client started, until the client closes in and
// every request it sent before was answered, or until ctx ends. A line of
// in that is not a JSON-RPC message gets a JSON-RPC error reply (-32700
// parse error, -32600 invalid request) and the session goes on.
func (p *Proxy) ServeStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser) error {
	flight := newInFlight()
	w := &answerWatcher{w: out, f: flight}
	t := &mcp.IOTransport{Reader: tagReader(in, flight, ctx.Done(), w), Writer: w}
	return p.server.Run(ctx, t)
}

// SessionIdleTimeout is how long a Proxy keeps an HTTP session that
// receives no request: a client that went away without ending its
// session.
const SessionIdleTimeout = 30 * time.Minute

// Handler returns the streamable HTTP handler of the proxy: every session
// on one endpoint. A session's tenant comes from TenantHeader. A session
// idle for SessionIdleTimeout is closed.
func (p *Proxy) Handler() http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return p.server },
		&mcp.StreamableHTTPOptions{Logger: discard, SessionTimeout: SessionIdleTimeout})
	return tagHTTP(h)
}

// add offers tool name: an MCP server's tool as the server described it
// (under its name here, with the description and input schema
// [tools.NAME] writes, if any), a command with what [tools.NAME] says.
func (p *Proxy) add(name string, info batch.ToolInfo, t sched.Tool) (err error) {
	tool := &mcp.Tool{}
	if info.Definition != nil {
		if err := json.Unmarshal(info.Definition, tool); err != nil {
			return fmt.Errorf("its server's description: %v", err)
		}
	} else {
		tool.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: t.ReadOnlyHint, IdempotentHint: t.Idempotent}
		tool.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	tool.Name = name
	if info.Description != "" {
		tool.Description = info.Description
	}
	if info.InputSchema != nil {
		tool.InputSchema = info.InputSchema
	}
	if tool.InputSchema == nil {
		return errors.New("it has no input schema")
	}
	defer func() { // the SDK panics on a description it refuses
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	p.server.AddTool(tool, p.handler(name))
	return nil
}

// handler runs a tools/call of tool name through the lanes.
func (p *Proxy) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		p.calls.Add(1)
		defer p.calls.Done()
		if p.stop.Err() != nil {
			return refusal("lanes: "+errProxyClosed.Error(), "", ""), nil
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		defer context.AfterFunc(p.stop, func() { cancel(errProxyClosed) })()
		tenant := p.o.Tenant
		if req.Extra != nil && req.Extra.Header != nil {
			if h := req.Extra.Header.Get(TenantHeader); h != "" {
				if err := validTenant(h); err != nil {
					return refusal(fmt.Sprintf("lanes: bad %s header: %v", TenantHeader, err), "", ""), nil
				}
				tenant = h
			}
		}
		runID := "mcp-" + lanes.NewID()
		call := sched.Call{ID: p.callID(req.Params.Meta, runID), Tool: name, Args: req.Params.Arguments}
		if len(call.Args) == 0 || string(call.Args) == "null" {
			call.Args = json.RawMessage(`{}`)
		}
		slot := &resultSlot{}
		if p.o.CallContext != nil {
			ctx = p.o.CallContext(ctx)
		}
		res, err := p.s.Run(context.WithValue(ctx, resultKey{}, slot), []sched.Call{call},
			sched.Options{RunID: runID, Tenant: tenant, Wait: p.o.Wait})
		if err != nil {
			return refusal("lanes: the call could not run: "+oneLine(err.Error()), "", ""), nil
		}
		o := res.Outcomes[0]
		if p.o.OnCall != nil {
			p.o.OnCall(CallOutcome{RequestID: call.ID, Tenant: tenant, Outcome: o})
		}
		return result(o, slot.get()), nil
	}
}

// result is what the client gets for a call that ended with o, where
// upstream is the MCP server's own result, if the call reached one.
func result(o sched.Outcome, upstream *mcp.CallToolResult) *mcp.CallToolResult {
	var r *mcp.CallToolResult
	switch {
	case o.Status == sched.OK && upstream != nil,
		o.Status == sched.Failed && o.Code == sched.CodeToolError && upstream != nil && upstream.IsError:
		copied := *upstream // the server's content, structured content and isError, as it sent them
		r = &copied
	case o.Status == sched.OK:
		r = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: o.Output}}}
	default:
		why := "not run"
		if o.Err != nil {
			why = oneLine(o.Err.Error())
		}
		return refusal(fmt.Sprintf("lanes: %s (%s): %s", o.Status, o.Code, why), o.Status, o.Code)
	}
	meta := mcp.Meta{MetaStatus: string(o.Status)}
	for k, v := range r.Meta {
		if !strings.HasPrefix(k, "io.modelcontextprotocol/") { // the server's hop's, not the client's
			meta[k] = v
		}
	}
	if o.Code != "" {
		meta[MetaCode] = string(o.Code)
	}
	if len(o.Tokens) > 0 {
		meta[MetaTokens] = tokensMeta(o.Tokens)
	}
	r.Meta = meta
	return r
}

// refusal is an isError result saying why.
func refusal(why string, status sched.Status, code sched.Code) *mcp.CallToolResult {
	r := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: why}}}
	if status != "" {
		r.Meta = mcp.Meta{MetaStatus: string(status), MetaCode: string(code)}
	}
	return r
}

// callID is the call id of a request: its JSON-RPC id, which the proxy
// wrote into its _meta (see tagRequestID), when it can be one; else a
// digest of it, or a number of the proxy's own.
func (p *Proxy) callID(meta mcp.Meta, runID string) string {
	var id string
	switch v := meta[metaRequestID].(type) {
	case string:
		id = v
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			id = strconv.FormatInt(int64(v), 10)
		} else {
			id = strconv.FormatFloat(v, 'g', -1, 64)
		}
	default:
		return "call-" + strconv.FormatUint(p.seq.Add(1), 10)
	}
	if id != "" && !strings.Contains(id, "#") && lanes.ValidateEntryID(runID+"/"+id+"#99999") == nil {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "req-" + hex.EncodeToString(sum[:8])
}

// validTenant reports whether t can name a tenant lane.
func validTenant(t string) error {
	if err := lanes.ValidateField("tenant", t); err != nil {
		return err
	}
	return lanes.ValidateKey(sched.TenantPrefix + t)
}

// WithoutRecords returns b without the run records of lanes.RunStore, and
// with its Check (lanes.Checker), if it has one: the backend of a Proxy's
// Session, whose calls are never run again by run id.
func WithoutRecords(b lanes.Backend) lanes.Backend {
	if c, ok := b.(lanes.Checker); ok {
		return struct {
			lanes.Backend
			lanes.Checker
		}{b, c}
	}
	return struct{ lanes.Backend }{b}
}
