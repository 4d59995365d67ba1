#!/usr/bin/env bash
# Where a proxied request's time and CPU go outside user-space instructions (issue 29, step
# 0 of ../shared/research/data-path.md): for nginx, the floors
# (crates/switchyard-gateway/examples/floors, one thread each; FLOORS picks some) and the
# gateway with two I/O threads and with one, at a fixed low rate (every request alone, as in the latency measurement):
# syscalls, context switches and user and system CPU per request, and the p50 latency
# added over calling the mock directly. The instruction counts, and what part of the stack
# they go to, are bench/instructions.sh's and bench/attribute.py's. Not part of CI.
#
#   bench/diagnose.sh                  # 2000 requests at 100 req/s on 4 connections
#   REQUESTS=5000 RATE=200 bench/diagnose.sh
#
# Two passes per target: the first counts context switches and CPU (/proc) and reads the
# latency; the second counts syscalls under strace, whose own cost would skew the first.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
REQUESTS=${REQUESTS:-2000}
RATE=${RATE:-100}
MOCK_PORT=19290 NGINX_PORT=19291 GW_PORT=19293 GW1_PORT=19294 FLOOR_PORT=19295  # floors from here on
KEY=sy-bench-key-000000000000000000000001

source "$root/bench/lib.sh"
ensure_commands strace nginx
ensure_oha
build_targets
KEEP_WORK=1  # the strace summaries stay
setup_work

nginx_config $NGINX_PORT "$work" "worker_processes 1;
master_process off;
daemon off;" > "$work/nginx.conf"
gateway_config $GW_PORT "$work/data" > "$work/gateway.toml"
gateway_config $GW1_PORT "$work/data-1" > "$work/gateway-1.toml"

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)
nginx -c "$work/nginx.conf" -p "$work" > "$work/nginx.log" 2>&1 & pids+=($!)
nginx_pid=$!
declare -A FLOOR_PID FLOOR_AT
port=$FLOOR_PORT
for f in $FLOORS; do
  "$root/target/release/examples/floors" "$f" 127.0.0.1:$port "http://127.0.0.1:$MOCK_PORT" 1 \
    > "$work/floor-$f.log" 2>&1 & pids+=($!)
  FLOOR_PID[$f]=$! FLOOR_AT[$f]=$port
  port=$((port + 1))
done
SWITCHYARD_LOG=warn SWITCHYARD_SERVER_IO_THREADS=2 "$BIN" serve --config "$work/gateway.toml" \
  > "$work/gateway.log" 2>&1 & pids+=($!)
gw_pid=$!
SWITCHYARD_LOG=warn SWITCHYARD_SERVER_IO_THREADS=1 "$BIN" serve --config "$work/gateway-1.toml" \
  > "$work/gateway-1.log" 2>&1 & pids+=($!)
gw1_pid=$!
wait_port $MOCK_PORT; wait_port $NGINX_PORT; wait_port $GW_PORT; wait_port $GW1_PORT
for f in $FLOORS; do wait_port "${FLOOR_AT[$f]}"; done

# oha's JSON for `n` requests of `model` to `port` at RATE on 4 connections; fails on a
# non-200 answer.
drive() { # port model n [rate]
  local rate=()
  [ -n "${4:-}" ] && rate=(-q "$4")
  "$OHA" --no-tui --output-format json -m POST \
    -H "Authorization: Bearer $KEY" -H "content-type: application/json" \
    -d "{\"model\":\"$2\",\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"benchmark\"}]}" \
    -n "$3" -c 4 "${rate[@]}" "http://127.0.0.1:$1/v1/chat/completions" > "$work/oha.json"
  python3 - "$work/oha.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
codes = r.get("statusCodeDistribution", {})
if set(codes) != {"200"}:
    sys.exit(f"non-200 answers: {codes}")
PY
}

p50_ms() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["latencyPercentiles"]["p50"] * 1000)' "$work/oha.json"; }

# Context switches of every thread of `pid`, and its user and system CPU in clock ticks.
ctxsw() { cat /proc/"$1"/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'; }
cpu_ticks() { awk '{print $14, $15}' /proc/"$1"/stat; }
TICK=$(getconf CLK_TCK)

results=()
# One target: warm up, then the /proc pass, then the strace pass.
measure() { # name pid port model
  local name=$1 pid=$2 port=$3 model=$4
  drive "$port" "$model" 300
  local c0 u0 s0 c1 u1 s1
  c0=$(ctxsw "$pid"); read -r u0 s0 < <(cpu_ticks "$pid")
  drive "$port" "$model" "$REQUESTS" "$RATE"
  c1=$(ctxsw "$pid"); read -r u1 s1 < <(cpu_ticks "$pid")
  local p50; p50=$(p50_ms)
  strace -f -c -o "$work/$name.strace" -p "$pid" 2> /dev/null &
  local tracer=$!
  sleep 1
  drive "$port" "$model" "$REQUESTS" "$RATE"
  kill -INT $tracer; wait $tracer 2> /dev/null || true
  local calls; calls=$(awk '$NF == "total" {print $(NF-2)}' "$work/$name.strace")
  results+=("$name $calls $((c1 - c0)) $((u1 - u0)) $((s1 - s0)) $p50")
}

drive $MOCK_PORT mock-small 300
drive $MOCK_PORT mock-small "$REQUESTS" "$RATE"
direct=$(p50_ms)
measure nginx $nginx_pid $NGINX_PORT mock-small
for f in $FLOORS; do measure "$f" "${FLOOR_PID[$f]}" "${FLOOR_AT[$f]}" mock-small; done
measure gateway $gw_pid $GW_PORT bench/mock-small
measure gateway-1 $gw1_pid $GW1_PORT bench/mock-small

echo
echo "Per request ($REQUESTS requests at $RATE req/s on 4 connections, $(date -u +%Y-%m-%dT%H:%MZ); mock direct p50 ${direct} ms):"
labels=()
for r in "${results[@]}"; do
  case ${r%% *} in
    nginx) labels+=("nginx (proxy_pass, one worker)") ;;
    gateway) labels+=("gateway, two I/O threads") ;;
    gateway-1) labels+=("gateway, one I/O thread") ;;
    *) labels+=("$(floor_label "${r%% *}")") ;;
  esac
done
python3 - "$REQUESTS" "$TICK" "$direct" "${#results[@]}" "${results[@]}" "${labels[@]}" <<'PY'
import sys
n, tick, direct, count = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rows, labels = sys.argv[5:5 + count], sys.argv[5 + count:]
print(f"{'target':42} {'syscalls':>9} {'ctx sw':>7} {'user µs':>8} {'sys µs':>7} {'p50 ms':>7} {'+p50 ms':>8}")
for row, label in zip(rows, labels):
    name, calls, cs, user, system, p50 = row.split()
    us = lambda ticks: int(ticks) * 1e6 / tick / n
    print(f"{label:42} {int(calls) / n:>9.1f} {int(cs) / n:>7.2f} {us(user):>8.1f} {us(system):>7.1f} {float(p50):>7.3f} {float(p50) - direct:>8.3f}")
PY
echo "strace summaries (syscall by syscall): $work/*.strace"
