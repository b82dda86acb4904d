package redislane

import (
	"time"

	"github.com/lanes-dev/lanes/lanes"
)

// SetPieces sets the most requests (enq) and ids (ids) one script run of b
// takes, so that tests split small steps.
func SetPieces(b *Backend, enq, ids int) { b.enqueuePiece, b.idPiece = enq, ids }

// SetInspectRereadTime sets how long Inspect's rereads may take
// (inspectRereadTime), so that tests of the rereads' count do not depend
// on the machine's speed, and tests of the bound do not wait.
func SetInspectRereadTime(b *Backend, d time.Duration) { b.rereadTime = d }

// AppendRequests appends the JSON of rs as an Enqueue step sends it.
func AppendRequests(b []byte, rs []lanes.Request) []byte { return appendRequests(b, rs) }
