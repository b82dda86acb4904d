#!/usr/bin/env bash
# make test: every package under -race, by scripts/testreport: each
# package's result as soon as it finishes (the slowest of the last run
# start first, two at a time on two cores), then which backends the
# conformance suite covered and every skipped test grouped by its reason.
# On a failure, the failing tests' names first, then only their output.
# The whole log goes to .cache/test.log. Arguments are packages (default:
# every module of go.work, the library, cmd/lanectl, integration, bench...,
# each as DIR/...); TESTREPORTFLAGS adds testreport's own (-p N, -goflags
# '...').
set -uo pipefail
mkdir -p .cache
redis=${LANES_REDIS_URL:-${REDIS_URL:-redis://127.0.0.1:6379}}
redis=$(printf '%s' "$redis" | sed -E 's#(://[^:/@]*:)[^@/]*@#\1xxxxx@#')
echo "go test -race, package by package (real Redis: $redis; whole log: .cache/test.log)"
if [ -n "${LANES_REQUIRE_REDIS:-}" ] && [ "${LANES_REQUIRE_REDIS}" != 0 ]; then
  echo "LANES_REQUIRE_REDIS=$LANES_REQUIRE_REDIS: a test that cannot reach Redis or find redis-server fails instead of skipping"
else
  echo "LANES_REQUIRE_REDIS not set: a test that cannot reach Redis or find redis-server skips (CI sets it: .ci/run)"
fi
# shellcheck disable=SC2086 # TESTREPORTFLAGS is split on purpose
exec go run ./scripts/testreport -log .cache/test.log -times .cache/test-times.json ${TESTREPORTFLAGS:-} "$@"
