// Package redisproc starts the redis-server processes tests need of their
// own: a standalone server (optionally with TLS, or as the replica of
// another), a Cluster of masters, a master with a replica and a Sentinel,
// and a fault-injecting TCP proxy in front of any of them. Each is stopped
// in the test's cleanup. A test skips, saying so, when redis-server is not
// on PATH (fails under LANES_REQUIRE_REDIS=1).
//
// It lives in the root module, beside the packages whose tests use it
// (cmd/lanectl, internal/ui), so that those tests need nothing of the
// integration module; integration/chaos re-exports it under its old names.
package redisproc
