package main

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
)

// TestConnectionDroppedMidCommandIsRetried checks that the client lanectl
// works with after its first contact keeps go-redis's retries: a
// connection the network drops while a command is in flight (a restarted
// server, a load balancer's reset) is dialed again and the command sent
// again, as before the first contact became one attempt (MaxRetries = -1
// on the probe, whose client connect returns for a server that answers
// INFO). A proxy in front of Redis closes the connection on the first
// command that names the namespace's keys; status must still work.
func TestConnectionDroppedMidCommandIsRetried(t *testing.T) {
	s := newRealRedis(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	backend := s.url[len("redis://"):]
	var once sync.Once
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				u, err := net.Dial("tcp", backend)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { io.Copy(c, u); c.Close() }()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					drop := false
					if bytes.Contains(buf[:n], []byte("lanes")) {
						once.Do(func() { drop = true })
					}
					if drop {
						return // the connection dies with the command unanswered
					}
					if _, err := u.Write(buf[:n]); err != nil {
						return
					}
				}
			}(c)
		}
	}()
	code, stdout, stderr := runInProcess(t, "--redis", "redis://"+l.Addr().String(), "--namespace", s.ns, "status")
	if code != exitOK {
		t.Errorf("status through a connection dropped once = %d; want %d (stdout %q, stderr %q)", code, exitOK, stdout, stderr)
	}
}
