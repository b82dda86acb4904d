package supervise

import (
	"maps"
	"os"
	ossignal "os/signal"
	"slices"
	"sync"
	"syscall"
)

// jobs is what continued needs: the supervised commands of this process
// that have not exited, and a watch for this process's SIGCONT that runs
// while any is starting or running.
var jobs = struct {
	sync.Mutex
	n        int // Starts under way and commands running, under a supervisor
	children map[*Child]bool
	conts    uint64 // the SIGCONTs the watch has seen
	stop     func() // ends the watch
}{children: map[*Child]bool{}}

// enterJobs counts a supervised Start under way, starting the watch if it
// is the first, and returns the SIGCONTs seen so far, for addJob.
func enterJobs() (since uint64) {
	jobs.Lock()
	defer jobs.Unlock()
	if jobs.n == 0 {
		jobs.stop = watchCont()
	}
	jobs.n++
	return jobs.conts
}

// addJob adds c, started, to the commands a SIGCONT continues. One that
// came while it started (since: enterJobs' answer) found it not yet there:
// it is continued now. (A runner above this one may have stopped it as it
// started, and continued this process but not it.)
func addJob(c *Child, since uint64) {
	jobs.Lock()
	jobs.children[c] = true
	owed := jobs.conts != since
	jobs.Unlock()
	if owed {
		c.continued()
	}
}

// leaveJobs ends what enterJobs began, for c once it exited (nil: a Start
// that failed), ending the watch if it was the last.
func leaveJobs(c *Child) {
	jobs.Lock()
	defer jobs.Unlock()
	delete(jobs.children, c)
	if jobs.n--; jobs.n == 0 {
		jobs.stop()
		jobs.stop = nil
	}
}

// watchCont calls continued for every command of jobs each time this
// process receives SIGCONT, until stop is called.
func watchCont() (stop func()) {
	ch := make(chan os.Signal, 1)
	ossignal.Notify(ch, syscall.SIGCONT)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-ch:
			}
			jobs.Lock()
			jobs.conts++
			cs := slices.Collect(maps.Keys(jobs.children))
			jobs.Unlock()
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Go(c.continued)
			}
			wg.Wait()
			if continuedHook != nil {
				continuedHook()
			}
		}
	}()
	return func() {
		ossignal.Stop(ch)
		close(done)
	}
}

// continuedHook, when set, runs after each pass of the watch: for the
// tests, to know that a runner has looked at its commands.
var continuedHook func()
