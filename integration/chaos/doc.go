// Package chaos is the fault-injection harness of lanes: it starts a private
// redis-server (standalone, with a lagging replica, or a three-master
// cluster), puts a TCP proxy between the clients and Redis to add latency,
// cut connections and drop a reply after its script committed, runs many
// replica processes (the chaosworker binary, which uses the lanes library
// and redislane directly) that record every operation into a history, and
// checks that history against the invariants of docs/DESIGN.md section 3.
//
// The pieces, one file each:
//
//   - history.go: the events a process records (invoked, succeeded, failed,
//     or uncertain), one JSON-lines file per process, merged after a run
//     into one Attempt per lane request.
//   - checkers.go and models.go: the checkers over a history: limit
//     (an owner-aware mutex and a semaphore with per-owner permits, as
//     porcupine models), fencing (tokens strictly increase in grant
//     order), FIFO (grants in enqueue order, for the pairs whose order is
//     known), liveness, the protected resource (no lost update), and
//     NoLeak over the namespace's Redis keys.
//   - workload.go: what a replica process does (the chaosworker binary is
//     a thin main around RunWorker).
//   - servers.go: redis-server processes, a cluster, a Sentinel setup and
//     the fault-injecting proxy (their code is in internal/redisproc, so
//     that tests of the root module use them too).
//   - harness.go: starts, stops, kills and restarts replica processes.
//   - stats.go: recovery times and the scenario report.
//
// docs/RELIABILITY.md lists the scenarios built from these pieces.
package chaos
