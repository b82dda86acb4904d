#!/usr/bin/env bash
# make test: every package under -race, then a summary: the packages, which
# backends the conformance suite covered, and every skipped test grouped by
# its reason. On a failure, the failing tests' output. The full log stays in
# .cache/test.log.
set -uo pipefail
mkdir -p .cache
log=.cache/test.log
go test -race -count=1 -v ./... >"$log" 2>&1
status=$?

grep -E '^(ok|FAIL|\?) ' "$log"
echo
echo "conformance suite, by backend:"
grep -E -- '^--- (PASS|FAIL|SKIP): TestConformance' "$log" | sed 's/ (.*//; s/^/  /'
skips=$(grep -E '^\s+\S+\.go:[0-9]+: SKIP: ' "$log" | sed -E 's/^\s+\S+\.go:[0-9]+: //' | sort | uniq -c)
if [ -n "$skips" ]; then
  echo
  echo "skipped tests, by reason:"
  echo "$skips" | sed 's/^/  /'
fi
if [ "$status" -ne 0 ]; then
  echo
  echo "FAILED; the failing tests (full log in $log):"
  grep -E -B2 -A25 -- '--- FAIL' "$log" | head -300
fi
exit "$status"
