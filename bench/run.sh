#!/usr/bin/env bash
# Load benchmark: the mock provider directly, nginx as a plain proxy_pass in front of the
# mock, and Switchyard in front of the mock, driven with the same load by oha on
# loopback, in one run. Prints requests/s and latency percentiles, and the ratios the
# foundation issue targets. Not part of CI: timings belong here, not in tests.
#
#   bench/run.sh                     # 3 interleaved rounds (about 4 minutes after the build)
#   DURATION=10s ROUNDS=5 bench/run.sh
#
# Installs nginx (Debian package) when missing, and oha as bench/lib.sh says.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DURATION=${DURATION:-6s}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
RATE=${RATE:-200}
TTFB_COUNT=${TTFB_COUNT:-500}
MOCK_PORT=19090 NGINX_PORT=19091 GW_PORT=19092 POOL_PORT=19093 FLOOR_PORT=19094
KEY=sy-bench-key-000000000000000000000001

command -v nginx >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends nginx; }
source "$root/bench/lib.sh"
ensure_oha
cargo build --release -q -p switchyard
cargo build --release -q -p switchyard-gateway --example floor
BIN=$root/target/release/switchyard
FLOOR=$root/target/release/examples/floor

setup_work

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)

nginx_config $NGINX_PORT "$work" "worker_processes auto;" > "$work/nginx.conf"
nginx -c "$work/nginx.conf" -p "$work"

gateway_config $GW_PORT "$work/data" > "$work/switchyard.toml"
pool_gateway_config $POOL_PORT "$work/data-pool" > "$work/switchyard-pool.toml"
SWITCHYARD_LOG=warn "$BIN" serve --config "$work/switchyard.toml" > "$work/gw.log" 2>&1 & pids+=($!)
SWITCHYARD_LOG=warn "$BIN" serve --config "$work/switchyard-pool.toml" > "$work/gw-pool.log" 2>&1 & pids+=($!)
# The HTTP stack's floor: the smallest axum + hyper proxy, no pipeline (its source says more).
"$FLOOR" 127.0.0.1:$FLOOR_PORT "http://127.0.0.1:$MOCK_PORT" > "$work/floor.log" 2>&1 & pids+=($!)
wait_port $MOCK_PORT; wait_port $NGINX_PORT; wait_port $GW_PORT; wait_port $POOL_PORT; wait_port $FLOOR_PORT

body() { printf '{"model":"%s","stream":%s,"messages":[{"role":"user","content":"benchmark"}]}' "$1" "$2"; }

# oha JSON → "rps p50_ms p99_ms success_ratio"
summarize() {
  python3 -c '
import json, sys
d = json.load(sys.stdin)
s, p = d["summary"], d["latencyPercentiles"]
codes = d.get("statusCodeDistribution", {})
ok = codes.get("200", 0) / max(1, sum(codes.values()))  # HTTP 200s, not merely answers
rps, p50, p99 = s["requestsPerSec"], p["p50"] * 1000, p["p99"] * 1000
print(f"{rps:.0f} {p50:.3f} {p99:.3f} {ok:.4f}")'
}

load() { # port model extra-oha-args...
  local port=$1 model=$2; shift 2
  "$OHA" --no-tui --output-format json -m POST \
    -H "content-type: application/json" -H "authorization: Bearer $KEY" \
    -d "$(body "$model" false)" "$@" "http://127.0.0.1:$port/v1/chat/completions" | summarize
}

# Targets are measured in interleaved rounds (mock, nginx, gateway, mock, …) and each
# figure is the median over the rounds, so background noise on this shared machine
# falls on all three alike instead of on whichever target ran during a busy spell.
declare -A RPS P50 P99 OK RATEP50 TTFB
TARGETS="mock nginx floor gateway pool"
port_of() { case $1 in mock) echo $MOCK_PORT ;; nginx) echo $NGINX_PORT ;; floor) echo $FLOOR_PORT ;; gateway) echo $GW_PORT ;; pool) echo $POOL_PORT ;; esac; }
model_of() { case $1 in gateway|pool) echo bench/mock-small ;; *) echo mock-small ;; esac; }
for t in $TARGETS; do RPS[$t]="" P50[$t]="" P99[$t]="" OK[$t]="" RATEP50[$t]="" TTFB[$t]=""; done
for t in $TARGETS; do load "$(port_of $t)" "$(model_of $t)" -z 2s -c $CONNS > /dev/null; done  # warm-up
# Each round starts at the next target (mock nginx floor gateway pool, then nginx floor
# gateway pool mock, ...), so no target is always measured right after the same neighbour: what a
# previous run leaves behind (CPU frequency, caches, deferred writes) falls on all alike.
read -r -a ORDER <<< "$TARGETS"
for round in $(seq 1 "$ROUNDS"); do
  for i in $(seq 0 $((${#ORDER[@]} - 1))); do
    t=${ORDER[$(( (i + round - 1) % ${#ORDER[@]} ))]}
    port=$(port_of $t) model=$(model_of $t)
    # The floor is one thread and buffers whole answers: only its low-rate latency is
    # comparable, so that is all it is measured for.
    if [ $t != floor ]; then
      read -r rps p50 p99 ok < <(load $port $model -z "$DURATION" -c $CONNS)
      RPS[$t]+="$rps " P50[$t]+="$p50 " P99[$t]+="$p99 " OK[$t]+="$ok "
      sleep 2  # let work deferred by the saturation run (log writes, WAL checkpoints) settle
    fi
    read -r _ rp50 _ ok < <(load $port $model -z "$DURATION" -c 4 -q $RATE)
    RATEP50[$t]+="$rp50 "
    [ $t = floor ] && OK[$t]+="$ok "
    if [ $t != floor ]; then
      read -r ttfb _ < <(python3 bench/ttfb.py 127.0.0.1 $port /v1/chat/completions "$KEY" $model $TTFB_COUNT)
      TTFB[$t]+="$ttfb "
    fi
  done
done
median() { [ -z "$1" ] && { echo -; return; }; python3 -c 'import statistics, sys; print(f"{statistics.median(map(float, sys.argv[1:])):.4f}".rstrip("0").rstrip("."))' $1; }
minimum() { python3 -c 'import sys; print(min(map(float, sys.argv[1:])))' $1; }
for t in $TARGETS; do
  RPS[$t]=$(median "${RPS[$t]}") P50[$t]=$(median "${P50[$t]}") P99[$t]=$(median "${P99[$t]}")
  OK[$t]=$(minimum "${OK[$t]}") RATEP50[$t]=$(median "${RATEP50[$t]}") TTFB[$t]=$(median "${TTFB[$t]}")
done

echo
echo "Switchyard load benchmark — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, oha $("$OHA" --version | awk '{print $2}'), nginx $(nginx -v 2>&1 | sed 's/.*\///')"
echo "medians of $ROUNDS interleaved rounds (target order rotated each round); non-streaming: $CONNS connections for $DURATION; fixed rate: $RATE req/s on 4 connections for $DURATION; streaming TTFB: $TTFB_COUNT sequential requests (success: worst round)"
printf '%-8s %10s %9s %9s %8s %14s %12s\n' target "req/s" "p50 ms" "p99 ms" "success" "p50@${RATE}/s ms" "TTFB p50 ms"
for t in $TARGETS; do
  printf '%-8s %10s %9s %9s %8s %14s %12s\n' $t "${RPS[$t]}" "${P50[$t]}" "${P99[$t]}" "${OK[$t]}" "${RATEP50[$t]}" "${TTFB[$t]}"
done
python3 - "${RPS[gateway]}" "${RPS[nginx]}" "${RPS[mock]}" "${RATEP50[mock]}" "${RATEP50[nginx]}" "${RATEP50[gateway]}" "${TTFB[nginx]}" "${TTFB[gateway]}" "${RPS[pool]}" "${RATEP50[floor]}" <<'PY'
import sys
gw, ngx, mock, rm, rn, rg, tn, tg, pool, rf = map(float, sys.argv[1:])
print(f"gateway/nginx req/s: {gw/ngx:.2f}  (target >= 0.80); nginx/mock: {ngx/mock:.2f}, gateway/mock: {gw/mock:.2f}")
print(f"added p50 at fixed rate: nginx {rn-rm:+.3f} ms, gateway {rg-rm:+.3f} ms  (target: gateway <= nginx); bare axum+hyper floor {rf-rm:+.3f} ms")
print(f"streaming TTFB p50: gateway - nginx = {tg-tn:+.3f} ms  (target <= 0.2 ms)")
print(f"gateway with a quota pool / without req/s: {pool/gw:.2f}  (target >= 0.85)")
PY
