package redislane

import "github.com/lanes-dev/lanes/lanes"

// SetPieces sets the most requests (enq) and ids (ids) one script run of b
// takes, so that tests split small steps.
func SetPieces(b *Backend, enq, ids int) { b.enqueuePiece, b.idPiece = enq, ids }

// AppendRequests appends the JSON of rs as an Enqueue step sends it.
func AppendRequests(b []byte, rs []lanes.Request) []byte { return appendRequests(b, rs) }
