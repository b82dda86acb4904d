#!/bin/bash
# takeover.sh LANECTL NAMESPACE: how long after a killed holder's lease
# runs out the waiter behind it gets the key (docs/BENCHMARKS.md, "The
# holder TTL"). A `lanectl lock --ttl 5s` holder is killed with SIGKILL,
# with its process group, while a `--ttl 10s` waiter waits behind it; the
# script prints the ms from the holder's deadline (its score in the
# namespace's deadlines key, read after the kill) to the first instant of
# the waiter's command. It needs redis-cli; the Redis is LANES_REDIS_URL's
# (default 127.0.0.1:6379), and the namespace's keys are deleted at the end.
set -eu
if [ $# -ne 2 ]; then
	echo "usage: $0 LANECTL NAMESPACE" >&2
	exit 64
fi
BIN=$1 NS=$2
export LANES_NAMESPACE=$NS
URL=${LANES_REDIS_URL:-redis://127.0.0.1:6379}
dir=$(mktemp -d)
trap 'rm -rf "$dir"; redis-cli -u "$URL" --scan --pattern "lanes:{$NS}:*" | xargs -r redis-cli -u "$URL" DEL >/dev/null' EXIT
setsid "$BIN" lock --ttl 5s k -- sh -c "echo held > $dir/held; sleep 1000" 2>/dev/null &
holder=$!
disown "$holder" # its kill is no news
while [ ! -s "$dir/held" ]; do sleep 0.01; done
"$BIN" lock --ttl 10s k -- sh -c "date +%s%N > $dir/granted" &
waiter=$!
sleep "1.$((RANDOM % 10))" # somewhere between two of the holder's renewals
kill -9 -- "-$holder" 2>/dev/null || true
sleep 0.05
deadline=$(redis-cli -u "$URL" ZRANGE "lanes:{$NS}:deadlines" 1 1 WITHSCORES | tail -1)
wait "$waiter" 2>/dev/null || true
granted=$(cat "$dir/granted")
echo $((granted / 1000000 - deadline))
