// Package integration holds the tests that run the real lanectl binary as
// many processes against a real Redis server: exclusion, order, crashes and
// clean-up across processes. They skip, saying so, when no Redis answers at
// LANES_REDIS_URL (or REDIS_URL, or redis://127.0.0.1:6379).
package integration
