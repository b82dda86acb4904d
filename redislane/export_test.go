package redislane

// SetPieces sets the most requests (enq) and ids (ids) one script run of b
// takes, so that tests split small steps.
func SetPieces(b *Backend, enq, ids int) { b.enqueuePiece, b.idPiece = enq, ids }
