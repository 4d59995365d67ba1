#!/usr/bin/env bash
# Load benchmark: the mock provider directly, nginx as a plain proxy_pass in front of the
# mock, the floors (the smallest proxies on tokio, one per data path, no pipeline:
# crates/switchyard-gateway/examples/floors; FLOORS picks some), and Switchyard in front
# of the mock with two I/O threads, with one, and with a quota pool, driven with the same
# load by oha on loopback, in one run. Prints requests/s and latency percentiles, and the ratios the
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
MOCK_PORT=19090 NGINX_PORT=19091 GW_PORT=19092 POOL_PORT=19093 GW1_PORT=19094 FLOOR_PORT=19095  # floors from here on
KEY=sy-bench-key-000000000000000000000001

source "$root/bench/lib.sh"
ensure_commands nginx
ensure_oha
build_targets

setup_work

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)
mock_provider_fields

nginx_config $NGINX_PORT "$work" "worker_processes auto;" > "$work/nginx.conf"
nginx -c "$work/nginx.conf" -p "$work"

gateway_config $GW_PORT "$work/data" > "$work/switchyard.toml"
gateway_config $GW1_PORT "$work/data-1" > "$work/switchyard-1.toml"
pool_gateway_config $POOL_PORT "$work/data-pool" > "$work/switchyard-pool.toml"
SWITCHYARD_LOG=warn "$BIN" serve --config "$work/switchyard.toml" > "$work/gw.log" 2>&1 & pids+=($!)
SWITCHYARD_LOG=warn SWITCHYARD_SERVER_IO_THREADS=1 "$BIN" serve --config "$work/switchyard-1.toml" > "$work/gw-1.log" 2>&1 & pids+=($!)
SWITCHYARD_LOG=warn "$BIN" serve --config "$work/switchyard-pool.toml" > "$work/gw-pool.log" 2>&1 & pids+=($!)
# The floors, with as many threads as nginx has workers and the gateway I/O threads.
declare -A FLOOR_AT
port=$FLOOR_PORT
for f in $FLOORS; do
  "$root/target/release/examples/floors" "$f" 127.0.0.1:$port "http://127.0.0.1:$MOCK_PORT" "$(nproc)" \
    > "$work/floor-$f.log" 2>&1 & pids+=($!)
  FLOOR_AT[$f]=$port
  port=$((port + 1))
done
wait_port $MOCK_PORT; wait_port $NGINX_PORT; wait_port $GW_PORT; wait_port $GW1_PORT; wait_port $POOL_PORT
for f in $FLOORS; do wait_port "${FLOOR_AT[$f]}"; done

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
TARGETS="mock nginx $FLOORS gateway gateway-1 pool"
port_of() { case $1 in mock) echo $MOCK_PORT ;; nginx) echo $NGINX_PORT ;; gateway) echo $GW_PORT ;; gateway-1) echo $GW1_PORT ;; pool) echo $POOL_PORT ;; *) echo "${FLOOR_AT[$1]}" ;; esac; }
model_of() { case $1 in gateway|gateway-1|pool) echo bench/mock-small ;; *) echo mock-small ;; esac; }
for t in $TARGETS; do RPS[$t]="" P50[$t]="" P99[$t]="" OK[$t]="" RATEP50[$t]="" TTFB[$t]=""; done
for t in $TARGETS; do load "$(port_of $t)" "$(model_of $t)" -z 2s -c $CONNS > /dev/null; done  # warm-up
# Each round starts at the next target (mock nginx … pool, then nginx … pool mock, ...), so no target is always measured right after the same neighbour: what a
# previous run leaves behind (CPU frequency, caches, deferred writes) falls on all alike.
read -r -a ORDER <<< "$TARGETS"
for round in $(seq 1 "$ROUNDS"); do
  for i in $(seq 0 $((${#ORDER[@]} - 1))); do
    t=${ORDER[$(( (i + round - 1) % ${#ORDER[@]} ))]}
    port=$(port_of $t) model=$(model_of $t)
    read -r rps p50 p99 ok < <(load $port $model -z "$DURATION" -c $CONNS)
    RPS[$t]+="$rps " P50[$t]+="$p50 " P99[$t]+="$p99 " OK[$t]+="$ok "
    sleep 2  # let work deferred by the saturation run (log writes, WAL checkpoints) settle
    read -r _ rp50 _ _ < <(load $port $model -z "$DURATION" -c 4 -q $RATE)
    RATEP50[$t]+="$rp50 "
    read -r ttfb _ < <(python3 bench/ttfb.py 127.0.0.1 $port /v1/chat/completions "$KEY" $model $TTFB_COUNT)
    TTFB[$t]+="$ttfb "
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
echo "medians of $ROUNDS interleaved rounds (target order rotated each round); non-streaming: $CONNS connections for $DURATION; fixed rate: $RATE req/s on 4 connections for $DURATION; streaming TTFB: $TTFB_COUNT sequential requests (success: worst round); $MOCK_HEADS"
label() { case $1 in mock) echo "mock (direct)" ;; nginx) echo "nginx proxy_pass" ;; gateway) echo "gateway" ;; gateway-1) echo "gateway, one I/O thread" ;; pool) echo "gateway + quota pool" ;; *) floor_label "$1" ;; esac; }
printf '%-42s %8s %7s %7s %8s %11s %8s %7s %8s %8s\n' target "req/s" "p50 ms" "p99 ms" success "p50@${RATE}/s" "TTFB ms" "÷ nginx" "+p50 ms" "+TTFB ms"
for t in $TARGETS; do
  read -r ratio added added_ttfb < <(python3 -c 'import sys; r, n, p, m, t, tn, tm = map(float, sys.argv[1:]); print(f"{r/n:.2f} {p-m:+.3f} {t-tm:+.3f}")' \
    "${RPS[$t]}" "${RPS[nginx]}" "${RATEP50[$t]}" "${RATEP50[mock]}" "${TTFB[$t]}" "${TTFB[nginx]}" "${TTFB[mock]}")
  printf '%-42s %8s %7s %7s %8s %11s %8s %7s %8s %8s\n' "$(label $t)" "${RPS[$t]}" "${P50[$t]}" "${P99[$t]}" "${OK[$t]}" "${RATEP50[$t]}" "${TTFB[$t]}" "$ratio" "$added" "$added_ttfb"
done
python3 - "${RPS[gateway]}" "${RPS[nginx]}" "${RATEP50[mock]}" "${RATEP50[nginx]}" "${RATEP50[gateway]}" "${TTFB[nginx]}" "${TTFB[gateway]}" "${RPS[pool]}" <<'PY'
import sys
gw, ngx, rm, rn, rg, tn, tg, pool = map(float, sys.argv[1:])
print(f"targets (issue 29): gateway/nginx req/s {gw/ngx:.2f} (>= 1.0); with a pool {pool/ngx:.2f} (>= 0.95);")
print(f"  added p50 at fixed rate: gateway {rg-rm:+.3f} ms vs nginx {rn-rm:+.3f} ms (no worse); streaming TTFB gateway - nginx {tg-tn:+.3f} ms (<= 0.05)")
PY
