#!/usr/bin/env bash
# make demo: eight processes share one lane with limit 2 through the
# embedded Redis-protocol server. Each holder appends "start TOKEN" and
# "end TOKEN" to one real file around a pause; the check then replays the
# file: never more than 2 holders at once, every holder granted after all
# but one of the earlier tokens had ended (FIFO order by token), 8 tokens.
set -euo pipefail
lanectl=${1:-bin/lanectl}
work=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$lanectl" dev-server >"$work/url" 2>"$work/server.log" &
server=$!
for _ in $(seq 200); do [ -s "$work/url" ] && break; sleep 0.05; done
LANES_REDIS_URL=$(head -n 1 "$work/url")
export LANES_REDIS_URL LANES_NAMESPACE=demo
echo "embedded server at $LANES_REDIS_URL"

log="$work/tokens.log"
: >"$log"
pids=()
for i in $(seq 1 8); do
  "$lanectl" lock --limit 2 --ttl 5s shared-file -- \
    sh -c 'echo "start $LANES_TOKEN" >>"$1"; sleep 0.4; echo "end $LANES_TOKEN" >>"$1"' sh "$log" &
  pids+=($!)
done

# Show the lane while they run: once someone waits, print who holds and who waits.
for _ in $(seq 100); do
  if "$lanectl" keys --json | grep -q '"waiters": *[1-9]'; then break; fi
  sleep 0.05
done
echo
"$lanectl" status shared-file
echo

status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
[ "$status" -eq 0 ] || { echo "a lanectl lock process failed with status $status"; exit 1; }

echo "the file the holders wrote:"
sed 's/^/  /' "$log"
awk -v limit=2 '
  $1 == "start" {
    running++; if (running > most) most = running
    earlier = 0
    for (t in open) if (t + 0 < $2 + 0) earlier++
    if (earlier > limit - 1) { printf "token %s granted while %d earlier tokens still ran\n", $2, earlier; bad = 1 }
    if ($2 in seen) { printf "token %s granted twice\n", $2; bad = 1 }
    seen[$2] = 1; open[$2] = 1; n++
  }
  $1 == "end" { running--; delete open[$2] }
  END {
    printf "\n%d holders, at most %d at once (limit %d)\n", n, most, limit
    if (most > limit) { print "FAIL: the limit was exceeded"; exit 1 }
    if (n != 8) { print "FAIL: expected 8 holders"; exit 1 }
    if (bad) { print "FAIL: grants out of token order"; exit 1 }
    print "OK: never more than 2 at once, and each holder started once all but one of the"
    print "    earlier tokens had ended (FIFO; two holders at once may log their start either way)"
  }' "$log"
