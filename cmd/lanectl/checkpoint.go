package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lanes-dev/lanes/cmd/lanectl/internal/pausesignal"
	"github.com/lanes-dev/lanes/lanes"
	"github.com/lanes-dev/lanes/sched"
)

// maxCheckpoint bounds the size of a --resume file: the calls of one model
// response and their outcomes.
const maxCheckpoint = 256 << 20

// pauseSignals is where the SIGUSR1s lanectl receives arrive:
// pausesignal's channel, on which they wait from the start of the process.
var pauseSignals = pausesignal.C()

// pauseOnSIGUSR1 returns a channel that closes at the first SIGUSR1 that
// sigs brings (sched.Options.Pause): one that came since lanectl started,
// before this call too, or one that comes later. The returned function
// stops listening and reports whether a SIGUSR1 came, up to that call; it
// reads what waits on sigs, so that none is left over. Call it once. A
// SIGUSR1 that came before the call closes the channel before it returns:
// the goroutine that waits for a later one may not run before the batch
// starts its first call.
func pauseOnSIGUSR1(sigs <-chan os.Signal) (<-chan struct{}, func() bool) {
	pause, quit, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	select {
	case <-sigs:
		close(pause)
		close(done)
	default:
		go func() {
			defer close(done)
			select {
			case <-sigs:
				close(pause)
			case <-quit:
			}
		}()
	}
	return pause, func() bool {
		close(quit)
		<-done
		asked := false
		select {
		case <-pause:
			asked = true
		default:
		}
		select { // a later SIGUSR1, or one the goroutine had no time for
		case <-sigs:
			asked = true
		default:
		}
		return asked
	}
}

// writeCheckpoint writes cp to path as JSON, in place of what path held,
// readable by its owner only (it holds the calls' arguments). Another
// process reading path sees the old file or the new one, never part of it.
func writeCheckpoint(path string, cf checkpointFile) error {
	data, err := json.MarshalIndent(cf, "", "  ")
	if err != nil {
		return fmt.Errorf("cannot encode the checkpoint: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("cannot write the checkpoint %s: %w", path, pathErr(err))
	}
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("cannot write the checkpoint %s: %w", path, pathErr(err))
	}
	return nil
}

// checkpointFile is a checkpoint file: sched.Checkpoint's fields, and
// where the batch's lanes were, which sched.Checkpoint does not hold: a
// resume runs there (batchOptions.resumeTarget). A file of a lanectl
// before these were recorded has none of them.
type checkpointFile struct {
	*sched.Checkpoint
	// Local: the batch ran --local, its lanes in its own process.
	Local bool `json:"local,omitempty"`
	// Namespace of its lanes in Redis; "" with Local.
	Namespace string `json:"namespace,omitempty"`
	// Server is the Redis server of its lanes, "host:port/db" with no
	// password (redisServer); "" with Local, or on a Cluster.
	Server string `json:"server,omitempty"`
}

// readCheckpoint reads a checkpoint that writeCheckpoint wrote.
func readCheckpoint(path string) (checkpointFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return checkpointFile{}, fmt.Errorf("cannot read the checkpoint %s: %w", path, pathErr(err))
	}
	defer f.Close()
	cf := checkpointFile{Checkpoint: new(sched.Checkpoint)}
	dec := json.NewDecoder(&limitReader{f: f, left: maxCheckpoint})
	if err := dec.Decode(&cf); err != nil {
		return checkpointFile{}, fmt.Errorf("%s is not a checkpoint of lanectl batch: %v", path, err)
	}
	cp := cf.Checkpoint
	if cp.RunID == "" || len(cp.Calls) != len(cp.Outcomes) {
		return checkpointFile{}, fmt.Errorf("%s is not a checkpoint of lanectl batch: it needs a run_id and one outcome per call", path)
	}
	if cf.Namespace != "" {
		if err := lanes.ValidateNamespace(cf.Namespace); err != nil {
			return checkpointFile{}, fmt.Errorf("%s is not a checkpoint of lanectl batch: its namespace: %v", path, err)
		}
	}
	if len(cf.Server) > 1024 || strings.ContainsAny(cf.Server, "@ \t\n") {
		return checkpointFile{}, fmt.Errorf("%s is not a checkpoint of lanectl batch: its server %.80q is no host:port/db", path, cf.Server)
	}
	return cf, nil
}

// pathErr drops the path an *fs.PathError repeats.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// limitReader fails a read past left bytes.
type limitReader struct {
	f    *os.File
	left int64
}

func (r *limitReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, fmt.Errorf("larger than %d MiB", maxCheckpoint>>20)
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.f.Read(p)
	r.left -= int64(n)
	return n, err
}
