#!/usr/bin/env bash
# make test: every package under -race, then a summary: the packages, which
# backends the conformance suite covered, and every skipped test grouped by
# its reason. On a failure, the failing tests and what they printed. The
# full log stays in .cache/test.log.
set -uo pipefail
mkdir -p .cache
log=.cache/test.log
redis=${LANES_REDIS_URL:-${REDIS_URL:-redis://127.0.0.1:6379}}
redis=$(printf '%s' "$redis" | sed -E 's#(://[^:/@]*:)[^@/]*@#\1xxxxx@#')
echo "go test -race ./... (real Redis: $redis; full log: $log)"
if [ -n "${LANES_REQUIRE_REDIS:-}" ] && [ "${LANES_REQUIRE_REDIS}" != 0 ]; then
  echo "LANES_REQUIRE_REDIS=$LANES_REQUIRE_REDIS: a test that cannot reach Redis or find redis-server fails instead of skipping"
else
  echo "LANES_REQUIRE_REDIS not set: a test that cannot reach Redis or find redis-server skips (CI sets it: .ci/run)"
fi
go test -race -count=1 -v ./... >"$log" 2>&1
status=$?

grep -E '^(ok|FAIL|\?)[[:space:]]' "$log"
echo
echo "conformance suite, by backend:"
grep -E -- '^--- (PASS|FAIL|SKIP): TestConformance' "$log" | sed 's/ (.*//; s/^/  /'
skips=$(grep -E '^\s+\S+\.go:[0-9]+: SKIP: ' "$log" | sed -E 's/^\s+\S+\.go:[0-9]+: //' | sort | uniq -c)
if [ -n "$skips" ]; then
  echo
  echo "skipped tests, by reason:"
  echo "$skips" | sed 's/^/  /'
fi
echo
if [ "$status" -ne 0 ]; then
  echo "FAILED. The failing tests, and the lines they logged (full log: $log):"
  grep -E -- '^\s*--- FAIL|^\s+\S+_test\.go:[0-9]+: |^panic:|^FAIL[[:space:]]' "$log" | grep -v ': SKIP: ' | head -200
else
  echo "all tests passed"
fi
exit "$status"
