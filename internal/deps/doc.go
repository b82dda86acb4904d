// Package deps holds no code. Its tests check what a user of the library
// inherits: a module that imports lanes, redislane, sched and fencing must
// find in its module graph none of what only lanectl, the benchmarks or the
// chaos harness use (they are modules of their own: go.work), and every
// go.mod of the repository asks for a Go release, not a patch of one.
package deps
