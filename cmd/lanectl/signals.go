package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// signalRelay turns the first SIGINT, SIGTERM, SIGHUP or SIGQUIT lanectl
// receives into the cancellation of its context, with an *interruptError as
// the cause, and hands every later one to the function registered with
// Forward (`lock` passes them on to its command). SIGHUP is left alone when
// lanectl started with it ignored (under nohup).
type signalRelay struct {
	ch     chan os.Signal
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu       sync.Mutex
	received bool
	forward  func(os.Signal)
}

// notifySignals returns a context that the first SIGINT or SIGTERM cancels,
// and the relay of the later ones. Stop the relay when done.
func notifySignals(parent context.Context) (context.Context, *signalRelay) {
	ctx, cancel := context.WithCancelCause(parent)
	r := &signalRelay{ch: make(chan os.Signal, 4), cancel: cancel, done: make(chan struct{})}
	sigs := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	signal.Notify(r.ch, sigs...)
	go r.loop()
	return ctx, r
}

func (r *signalRelay) loop() {
	for {
		select {
		case <-r.done:
			return
		case s := <-r.ch:
			r.mu.Lock()
			first, forward := !r.received, r.forward
			r.received = true
			r.mu.Unlock()
			if sig, ok := s.(syscall.Signal); ok && first {
				r.cancel(&interruptError{sig: sig})
			} else if forward != nil {
				forward(s)
			}
		}
	}
}

// Forward makes f receive every signal after the one that cancelled the
// context, until the returned function is called. A nil relay forwards
// nothing.
func (r *signalRelay) Forward(f func(os.Signal)) (stop func()) {
	if r == nil {
		return func() {}
	}
	r.mu.Lock()
	r.forward = f
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.forward = nil
		r.mu.Unlock()
	}
}

// Stop ends the relay; signals get their default behaviour back.
func (r *signalRelay) Stop() {
	signal.Stop(r.ch)
	close(r.done)
	r.cancel(nil)
}

// interruption returns the signal that cancelled ctx, if one did.
func interruption(ctx context.Context) (syscall.Signal, bool) {
	var ie *interruptError
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &ie) {
		return ie.sig, true
	}
	return 0, false
}

// signalName returns SIGINT, SIGTERM...
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return "signal " + sig.String()
}
