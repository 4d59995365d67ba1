#!/usr/bin/env bash
# What an open dashboard costs the request path: the pooled gateway of bench/run.sh
# (every request decided, reserved and settled by a quota pool) under the same oha load,
# in interleaved rounds without and with a poller that fetches the pool's page and the
# overview as ten browser tabs would (the pool page refreshes every 5 s, so 2 pool pages
# and 2 overviews a second). Prints the medians and the ratios. Not part of CI.
#
#   bench/dashboard.sh
#   DURATION=10s ROUNDS=5 bench/dashboard.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DURATION=${DURATION:-6s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
POLLS_PER_SECOND=${POLLS_PER_SECOND:-2}
MOCK_PORT=19190 POOL_PORT=19193
KEY=sy-bench-key-000000000000000000000001
ADMIN=bench-admin-token-0123456789

source "$root/bench/lib.sh"
ensure_oha
cargo build --release -q -p switchyard
BIN=$root/target/release/switchyard

setup_work

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)
pool_gateway_config $POOL_PORT "$work/data" > "$work/switchyard.toml"
SWITCHYARD_LOG=warn "$BIN" serve --config "$work/switchyard.toml" > "$work/gw.log" 2>&1 & pids+=($!)
wait_port $MOCK_PORT; wait_port $POOL_PORT

cookie=$(python3 - "$POOL_PORT" "$ADMIN" <<'PY'
import http.client, sys, urllib.parse
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
c.request("POST", "/dashboard/sign-in", urllib.parse.urlencode({"token": sys.argv[2]}),
          {"content-type": "application/x-www-form-urlencoded"})
r = c.getresponse()
assert r.status == 303, r.status
print(r.getheader("set-cookie").split(";")[0])
PY
)

body='{"model":"bench/mock-small","stream":false,"messages":[{"role":"user","content":"benchmark"}]}'
load() {
  "$OHA" --no-tui --output-format json -m POST \
    -H "content-type: application/json" -H "authorization: Bearer $KEY" \
    -d "$body" -z "$DURATION" -c $CONNS "http://127.0.0.1:$POOL_PORT/v1/chat/completions" |
    python3 -c '
import json, sys
d = json.load(sys.stdin)
s, p = d["summary"], d["latencyPercentiles"]
codes = d.get("statusCodeDistribution", {})
ok = codes.get("200", 0) / max(1, sum(codes.values()))
rps, p50, p99 = s["requestsPerSec"], p["p50"] * 1000, p["p99"] * 1000
print(f"{rps:.0f} {p50:.3f} {p99:.3f} {ok:.4f}")'
}

# Fetches the pool's page and the overview POLLS_PER_SECOND times a second each, until
# killed; every answer must be a 200 page.
# Writes a line to $work/polls.log per pair of pages fetched.
poll() {
  exec python3 - "$POOL_PORT" "$cookie" "$POLLS_PER_SECOND" >> "$work/polls.log" <<'PY'
import http.client, sys, time
port, cookie, rate = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
while True:
    start = time.monotonic()
    for path in ("/dashboard/costs/quota-share/bench", "/dashboard"):
        c = http.client.HTTPConnection("127.0.0.1", port)
        c.request("GET", path, headers={"cookie": cookie, "hx-request": "true"})
        r = c.getresponse()
        r.read()
        assert r.status == 200, (path, r.status)
        c.close()
    print("polled", flush=True)
    time.sleep(max(0.0, 1.0 / rate - (time.monotonic() - start)))
PY
}

load > /dev/null  # warm-up
declare -A RPS P50 P99 OK
for m in alone polled; do RPS[$m]="" P50[$m]="" P99[$m]="" OK[$m]=""; done
: > "$work/polls.log"
for round in $(seq 1 "$ROUNDS"); do
  order="alone polled"
  [ $((round % 2)) = 0 ] && order="polled alone"
  for m in $order; do
    poller=""
    if [ $m = polled ]; then poll & poller=$!; sleep 1; fi
    read -r rps p50 p99 ok < <(load)
    [ -n "$poller" ] && { kill "$poller"; wait "$poller" 2>/dev/null || true; }
    RPS[$m]+="$rps " P50[$m]+="$p50 " P99[$m]+="$p99 " OK[$m]+="$ok "
    sleep 2
  done
done
median() { python3 -c 'import statistics, sys; print(f"{statistics.median(map(float, sys.argv[1:])):.4f}".rstrip("0").rstrip("."))' $1; }
minimum() { python3 -c 'import sys; print(min(map(float, sys.argv[1:])))' $1; }
echo
echo "Dashboard cost benchmark — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores; pooled gateway, $CONNS connections for $DURATION, medians of $ROUNDS interleaved rounds; poller: $POLLS_PER_SECOND pool pages and $POLLS_PER_SECOND overviews a second"
printf '%-8s %10s %9s %9s %8s\n' load "req/s" "p50 ms" "p99 ms" "success"
for m in alone polled; do
  printf '%-8s %10s %9s %9s %8s\n' $m "$(median "${RPS[$m]}")" "$(median "${P50[$m]}")" "$(median "${P99[$m]}")" "$(minimum "${OK[$m]}")"
done
echo "pages fetched while polling: $(( $(wc -l < "$work/polls.log") * 2 )) (every one a 200)"
python3 - "$(median "${RPS[alone]}")" "$(median "${RPS[polled]}")" "$(median "${P99[alone]}")" "$(median "${P99[polled]}")" <<'PY'
import sys
ra, rp, pa, pp = map(float, sys.argv[1:])
print(f"polled/alone req/s: {rp/ra:.3f}; p99: {pp/pa:.3f}")
PY
