package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lanes-dev/lanes/internal/redistest"
)

// RequireRedisServer skips tb, with a message that says so, when no
// redis-server binary is on PATH (fails it under LANES_REQUIRE_REDIS=1),
// and returns its path otherwise.
func RequireRedisServer(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		redistest.Unavailable(tb, "redis-server not on PATH (%v); the chaos scenarios start their own server (apt-get install redis-server)", err)
	}
	return p
}

// ServerOptions configures a private redis-server.
type ServerOptions struct {
	AOF       bool     // --appendonly yes --appendfsync always: every acknowledged write survives a SIGKILL
	Cluster   bool     // --cluster-enabled yes
	ReplicaOf string   // host:port of the master to replicate, or ""
	Extra     []string // more arguments
	// Config is the text of a config file written to the server's
	// directory and given first (Sentinel rewrites its own), or "".
	Config string
	// Sentinel runs redis-server --sentinel (it needs a Config to rewrite).
	Sentinel bool
	// TLS, when set, makes the server speak TLS only (its Port is a
	// --tls-port; the cluster bus and replication use TLS too), and the
	// test's clients of it trust TLS.CA.
	TLS *TLSFiles
}

// Server is a redis-server process on a loopback port that a test owns: it
// can kill, restart, pause and resume it. Everything ends with the test.
type Server struct {
	tb   testing.TB
	opts ServerOptions
	Port int
	Dir  string
	bin  string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartServer starts a redis-server on a free loopback port (retrying on a
// port conflict) with its data in a fresh directory, and stops it when tb
// ends. It skips tb when redis-server is missing.
func StartServer(tb testing.TB, opts ServerOptions) *Server {
	tb.Helper()
	bin := RequireRedisServer(tb)
	s := &Server{tb: tb, opts: opts, Dir: tb.TempDir(), bin: bin}
	tb.Cleanup(s.stop)
	var err error
	for range 5 {
		if s.Port, err = FreePort(); err != nil {
			continue
		}
		if err = s.start(); err == nil {
			return s
		}
	}
	if opts.TLS != nil && strings.Contains(err.Error(), "Bad directive") {
		redistest.Unavailable(tb, "redis-server was built without TLS: %v", err)
	}
	tb.Fatalf("starting redis-server: %v", err)
	return nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) args() []string {
	var a []string
	if s.opts.Config != "" {
		a = append(a, filepath.Join(s.Dir, "redis.conf"))
		if s.opts.Sentinel {
			a = append(a, "--sentinel")
		}
	}
	if t := s.opts.TLS; t != nil {
		a = append(a, "--port", "0", "--tls-port", strconv.Itoa(s.Port), "--tls-cert-file", t.Cert, "--tls-key-file", t.Key,
			"--tls-ca-cert-file", t.CA, "--tls-auth-clients", "no", "--tls-cluster", "yes", "--tls-replication", "yes")
	} else {
		a = append(a, "--port", strconv.Itoa(s.Port))
	}
	a = append(a, "--bind", "127.0.0.1", "--dir", s.Dir,
		"--save", "", "--daemonize", "no", "--protected-mode", "no",
		"--logfile", filepath.Join(s.Dir, "redis.log"))
	if s.opts.AOF {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--appendonly", "no")
	}
	if s.opts.Cluster {
		a = append(a, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.Dir, "nodes.conf"),
			"--cluster-node-timeout", "5000")
	}
	if s.opts.ReplicaOf != "" {
		h, p, _ := net.SplitHostPort(s.opts.ReplicaOf)
		a = append(a, "--replicaof", h, p)
	}
	return append(a, s.opts.Extra...)
}

// start runs redis-server and waits until it answers PING.
func (s *Server) start() error {
	conf := filepath.Join(s.Dir, "redis.conf")
	if _, err := os.Stat(conf); s.opts.Config != "" && err != nil {
		// Written once: a restarted Sentinel keeps what it rewrote.
		if err := os.WriteFile(conf, []byte(s.opts.Config), 0o600); err != nil {
			return err
		}
	}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A bad option is told on stderr, before the log file is opened.
	stderr, err := os.Create(filepath.Join(s.Dir, "stderr.log"))
	if err != nil {
		return err
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, TLSConfig: s.opts.TLS.Config()})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			errs, _ := os.ReadFile(filepath.Join(s.Dir, "stderr.log"))
			return fmt.Errorf("redis-server on port %d exited: %s", s.Port, lastLines(string(errs)+string(log), 5))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		// LOADING: the server answers but is still reading its AOF.
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on port %d did not answer: %v", s.Port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], " | ")
}

// Addr returns host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL returns the redis:// URL of the server, rediss:// with TLS.
func (s *Server) URL() string {
	if s.opts.TLS != nil {
		return "rediss://" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// Client returns a new client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: time.Second, TLSConfig: s.opts.TLS.Config()})
	s.tb.Cleanup(func() { c.Close() })
	return c
}

// PID returns the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Kill sends SIGKILL (as a crash would) and waits for the process to end.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGCONT) // a stopped server dies too
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// Restart starts the server again on the same port and directory (after
// Kill): with AOF it reloads its data, without it starts empty. Another
// process may hold the port for a moment after the kill, so it retries.
func (s *Server) Restart() {
	s.tb.Helper()
	var err error
	for range 50 {
		if err = s.start(); err == nil {
			return
		}
		if !strings.Contains(err.Error(), "in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.tb.Fatalf("restarting redis-server: %v", err)
}

// Pause stops the server with SIGSTOP: connections stay open, nothing is
// answered, its clock goes on.
func (s *Server) Pause() { _ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { _ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT) }

func (s *Server) stop() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.Kill()
}

// InfoField returns one field of INFO (e.g. "master_repl_offset"), "" if absent.
func InfoField(ctx context.Context, c *redis.Client, section, field string) (string, error) {
	text, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", nil
}

// WaitReplicaSynced waits until replica has applied everything master has
// sent (equal replication offsets) and its link is up.
func WaitReplicaSynced(ctx context.Context, master, replica *redis.Client) error {
	for {
		mo, err1 := InfoField(ctx, master, "replication", "master_repl_offset")
		ro, err2 := InfoField(ctx, replica, "replication", "slave_repl_offset")
		up, err3 := InfoField(ctx, replica, "replication", "master_link_status")
		if err := errors.Join(err1, err2, err3); err == nil && up == "up" && mo != "" && mo == ro {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica not in sync (master offset %s, replica %s, link %s): %w", mo, ro, up, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
