package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is the Redis server of the run: one the user gave, or a private
// redis-server this program started.
type server struct {
	opts    *redis.Options // parsed URL; every client copies it
	addr    string
	origin  string // "given" or "spawned"
	pinned  string // how the CPUs were split, when they were
	version string
	admin   *redis.Client // INFO, CLIENT LIST, MEMORY USAGE, cleanup
	proc    *exec.Cmd     // the spawned redis-server, if any
	dir     string
}

// redisLog is go-redis's logger: stderr, as by default, but silent while
// this program probes a server that may not be there.
var redisLog = &quietLogger{}

func init() { redis.SetLogger(redisLog) }

type quietLogger struct{ quiet atomic.Bool }

func (l *quietLogger) Printf(_ context.Context, format string, v ...any) {
	if !l.quiet.Load() {
		fmt.Fprintf(os.Stderr, "redis: "+format+"\n", v...)
	}
}

// errNoServer: no server answered and redis-server is not installed.
var errNoServer = errors.New("no Redis server answered and redis-server is not installed")

func isNoServer(err error) bool { return errors.Is(err, errNoServer) }

// connect returns the server at url (or the environment's), or starts a
// private redis-server when none answers or spawn is set.
func connect(ctx context.Context, url string, spawn bool) (*server, error) {
	if url == "" {
		url = cmp.Or(os.Getenv("LANES_REDIS_URL"), os.Getenv("REDIS_URL"), "redis://127.0.0.1:6379")
	}
	if !spawn {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis URL %q: %w", url, err)
		}
		s := &server{opts: opts, addr: opts.Addr, origin: "given: " + redactURL(url)}
		if err := s.dial(ctx); err == nil {
			return s, nil
		}
		fmt.Fprintf(os.Stderr, "bench: %s does not answer; starting a private redis-server\n", redactURL(url))
	}
	return spawnServer(ctx)
}

func redactURL(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}

func (s *server) dial(ctx context.Context) error {
	redisLog.quiet.Store(true)
	defer redisLog.quiet.Store(false)
	o := *s.opts
	o.ClientName = "lanes-bench-admin"
	c := redis.NewClient(&o)
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return err
	}
	info, err := c.Info(pctx, "server").Result()
	if err != nil {
		c.Close()
		return err
	}
	s.version = infoField(info, "redis_version")
	s.admin = c
	return nil
}

// spawnServer starts redis-server on a free loopback port, without
// persistence, and waits until it answers.
func spawnServer(ctx context.Context) (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoServer
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "lanes-bench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--pidfile", filepath.Join(dir, "redis.pid"), "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s := &server{opts: &redis.Options{Addr: addr}, addr: addr, origin: "spawned: " + bin, proc: cmd, dir: dir}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err = s.dial(ctx); err == nil {
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.close()
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, fmt.Errorf("redis-server on %s did not answer: %v\n%s", addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// close stops a spawned server and closes the admin client.
func (s *server) close() {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.proc != nil {
		_ = s.proc.Process.Signal(syscall.SIGTERM) // no persistence: it exits at once
		done := make(chan struct{})
		go func() { _ = s.proc.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			_ = s.proc.Process.Kill()
			<-done
		}
		os.RemoveAll(s.dir)
	}
}

// env is what every measurement shares: the server, the run's id and key
// prefixes, the flags, and every client opened (closed by cleanup).
type env struct {
	srv *server
	cfg config
	run string // random id in every key and client name of this run

	mu      sync.Mutex
	clients []*redis.Client
	sems    map[string]*semEntry // the in-process semaphores, by scope and key
	enqSeq  int                  // enqueue steps measured so far: their ids differ
}

func newEnv(srv *server, cfg config) *env {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &env{srv: srv, cfg: cfg, run: hex.EncodeToString(b), sems: map[string]*semEntry{}}
}

func (e *env) wants(col string) bool {
	return len(e.cfg.cols) == 0 || slices.Contains(e.cfg.cols, col)
}

// keyPrefix is the prefix of every plain Redis key of one contender kind in
// one measurement scope.
func (e *env) keyPrefix(kind, scope string) string {
	return "bench:" + e.run + ":" + kind + ":" + scope + ":"
}

// lanesNamespace is the lanes namespace of one measurement scope.
func (e *env) lanesNamespace(scope string) string {
	return "bench-" + e.run + "-" + scope
}

// clientName is the CLIENT SETNAME of one simulated process.
func (e *env) clientName(kind, scope string, i int) string {
	return fmt.Sprintf("lanes-bench-%s-%s-%s-%d", e.run, kind, scope, i)
}

// newClient opens a client, as one simulated process would, counting its
// round trips in rt (when not nil), with the extra hooks.
func (e *env) newClient(name string, rt *atomic.Int64, hooks ...redis.Hook) *redis.Client {
	o := *e.srv.opts
	o.ClientName = name
	c := redis.NewClient(&o)
	if rt != nil {
		c.AddHook(&roundTrips{n: rt})
	}
	for _, h := range hooks {
		c.AddHook(h)
	}
	e.mu.Lock()
	e.clients = append(e.clients, c)
	e.mu.Unlock()
	return c
}

// cleanup closes the clients left open and deletes every key of the run.
func (e *env) cleanup() {
	e.mu.Lock()
	cs := e.clients
	e.clients = nil
	e.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for _, pat := range []string{"bench:" + e.run + ":*", "lanes:{bench-" + e.run + "-*"} {
		n += deleteMatching(ctx, e.srv.admin, pat)
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "bench: deleted %d keys of run %s\n", n, e.run)
	}
}

func deleteMatching(ctx context.Context, c *redis.Client, pattern string) int {
	var cursor uint64
	n := 0
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: cleanup scan %s: %v\n", pattern, err)
			return n
		}
		if len(keys) > 0 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				fmt.Fprintf(os.Stderr, "bench: cleanup: %v\n", err)
			}
			n += len(keys)
		}
		if cursor = next; cursor == 0 {
			return n
		}
	}
}

// roundTrips is a go-redis hook that counts what a client sends: one per
// command, one per pipeline.
type roundTrips struct{ n *atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// infoField returns one "name:value" field of an INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// serverCounters is what INFO says about the work the server did.
type serverCounters struct {
	calls map[string]int64 // per command: calls (scripts' inner commands included)
	usec  map[string]int64 // per command: microseconds spent in it (a script's include its inner commands')
	cpu   float64          // used_cpu_user + used_cpu_sys, seconds
}

func readCounters(ctx context.Context, c *redis.Client) (serverCounters, error) {
	info, err := c.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return serverCounters{}, err
	}
	sc := serverCounters{calls: map[string]int64{}, usec: map[string]int64{}}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, fields, _ := strings.Cut(rest, ":")
			for _, f := range strings.Split(fields, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					sc.calls[name], _ = strconv.ParseInt(v, 10, 64)
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					sc.usec[name], _ = strconv.ParseInt(v, 10, 64)
				}
			}
		}
	}
	u, _ := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
	s, _ := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
	sc.cpu = u + s
	return sc, nil
}

// sub returns the calls per command between a and b, without the INFO
// calls that read them.
func (b serverCounters) sub(a serverCounters) (map[string]int64, float64) {
	d := map[string]int64{}
	for k, v := range b.calls {
		if k == "info" {
			continue
		}
		if x := v - a.calls[k]; x != 0 {
			d[k] = x
		}
	}
	return d, b.cpu - a.cpu
}

// usecSub returns the microseconds per command between a and b, without
// INFO.
func (b serverCounters) usecSub(a serverCounters) map[string]int64 {
	d := map[string]int64{}
	for k, v := range b.usec {
		if k == "info" {
			continue
		}
		if x := v - a.usec[k]; x != 0 {
			d[k] = x
		}
	}
	return d
}

// scriptCommands are the commands that run a script or a function: their
// commandstats usec is the script's whole run, inner commands included.
var scriptCommands = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

func isScriptCommand(name string) bool { return slices.Contains(scriptCommands, strings.ToLower(name)) }

// cmdLog is a go-redis hook that counts, by name, every command a client
// sends, each command of a pipeline included: the commands Redis runs at
// the top level for it. (roundTrips counts a pipeline once.)
type cmdLog struct {
	mu sync.Mutex
	n  map[string]int64
}

func newCmdLog() *cmdLog { return &cmdLog{n: map[string]int64{}} }

func (l *cmdLog) add(cmd redis.Cmder) {
	l.mu.Lock()
	l.n[strings.ToLower(cmd.Name())]++
	l.mu.Unlock()
}

// snapshot returns the counts so far.
func (l *cmdLog) snapshot() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.n)
}

func (l *cmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}
func (l *cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			l.add(c)
		}
		return next(ctx, cmds)
	}
}

// countClients returns the connections whose name is name.
func countClients(ctx context.Context, c *redis.Client, name string) (int, error) {
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if f == "name="+name {
				n++
			}
		}
	}
	return n, nil
}
