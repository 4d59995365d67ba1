#!/usr/bin/env bash
# Instructions per proxied request, gateway against nginx, counted by valgrind's
# callgrind. Unlike timings, instruction counts repeat exactly for the same binary and
# load whatever else the machine is doing, so this is the measure to compare CPU work on
# the request path. Not part of CI.
#
#   bench/instructions.sh            # 2000 requests at 100 req/s on 4 connections
#   REQUESTS=5000 bench/instructions.sh
#
# Prints, per request: nginx (one worker process, everything it runs), the floors (the
# smallest proxies on tokio, one per data path, crates/switchyard-gateway/examples/floors;
# FLOORS picks some), the gateway's
# I/O threads (the request path: HTTP server, pipeline, upstream client) and the
# gateway's whole process (adds the request-log writer, which runs off the request
# path), and the same for the gateway with a quota pool on its connection. The
# callgrind files stay in the printed directory for callgrind_annotate.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
REQUESTS=${REQUESTS:-2000}
MOCK_PORT=19190 NGINX_PORT=19191 GW_PORT=19192 POOL_PORT=19193 FLOOR_PORT=19194  # floors from here on
KEY=sy-bench-key-000000000000000000000001

source "$root/bench/lib.sh"
ensure_commands valgrind nginx
ensure_oha
build_targets

KEEP_WORK=1  # the callgrind files stay for callgrind_annotate
setup_work

nginx_config $NGINX_PORT "$work" "worker_processes 1;
master_process off;
daemon off;" > "$work/nginx.conf"
gateway_config $GW_PORT "$work/data" > "$work/switchyard.toml"
pool_gateway_config $POOL_PORT "$work/data-pool" > "$work/switchyard-pool.toml"

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)
mock_provider_fields
valgrind --tool=callgrind --callgrind-out-file="$work/nginx.cg" \
  nginx -c "$work/nginx.conf" -p "$work" > "$work/nginx-vg.log" 2>&1 & pids+=($!)
nginx_pid=$!
SWITCHYARD_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$work/gateway.cg" \
  "$BIN" serve --config "$work/switchyard.toml" > "$work/gateway-vg.log" 2>&1 & pids+=($!)
gateway_pid=$!
SWITCHYARD_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$work/pool.cg" \
  "$BIN" serve --config "$work/switchyard-pool.toml" > "$work/pool-vg.log" 2>&1 & pids+=($!)
pool_pid=$!
declare -A FLOOR_PID FLOOR_AT
port=$FLOOR_PORT
for f in $FLOORS; do
  valgrind --tool=callgrind --callgrind-out-file="$work/floor-$f.cg" \
    "$root/target/release/examples/floors" "$f" 127.0.0.1:$port "http://127.0.0.1:$MOCK_PORT" 1 \
    > "$work/floor-$f-vg.log" 2>&1 & pids+=($!)
  FLOOR_PID[$f]=$! FLOOR_AT[$f]=$port
  port=$((port + 1))
done
wait_port $MOCK_PORT; wait_port $NGINX_PORT; wait_port $GW_PORT; wait_port $POOL_PORT
for f in $FLOORS; do wait_port "${FLOOR_AT[$f]}"; done

drive() { # port model requests extra-oha-args...
  local port=$1 model=$2 n=$3; shift 3
  "$OHA" --no-tui --output-format json -m POST \
    -H "content-type: application/json" -H "authorization: Bearer $KEY" \
    -d "{\"model\":\"$model\",\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"benchmark\"}]}" \
    -n "$n" -c 4 "$@" "http://127.0.0.1:$port/v1/chat/completions" |
    python3 -c 'import json,sys; c=json.load(sys.stdin).get("statusCodeDistribution",{}); sys.exit(0 if set(c)=={"200"} else f"non-200 answers: {c}")'
}

# Warm up (connection pools, lazily built state), zero the counters, run the measured
# load at a low fixed rate (every request alone, as in the latency measurement), dump.
measure() { # pid port model
  drive "$2" "$3" 300
  callgrind_control -z "$1" > /dev/null 2>&1
  drive "$2" "$3" "$REQUESTS" -q 100
  callgrind_control -d "$1" > /dev/null 2>&1
}
measure $nginx_pid $NGINX_PORT mock-small
for f in $FLOORS; do measure "${FLOOR_PID[$f]}" "${FLOOR_AT[$f]}" mock-small; done
measure $gateway_pid $GW_PORT bench/mock-small
measure $pool_pid $POOL_PORT bench/mock-small
sleep 1

total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }
# The I/O threads' entry point: everything a request costs on its way through. The
# compiler attributes the inlined thread closure to server.rs or to the current-thread
# runtime it runs (the only one spawned on its own thread: the main runtime runs on the
# main thread, the blocking pool's threads are the writers').
io_threads() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk '/(switchyard-gateway\/src\/server.rs|runtime\/scheduler\/current_thread\/mod.rs):std::sys::backtrace::__rust_begin_short_backtrace/ && !n++ {gsub(",", "", $1); print $1}'
}
per() { python3 -c "print(round($1 / $REQUESTS))"; }
nginx_ir=$(total "$work/nginx.cg.1")
gw_ir=$(total "$work/gateway.cg.1")
gw_io=$(io_threads "$work/gateway.cg.1")
echo
echo "Instructions per request (callgrind, $REQUESTS requests at 100 req/s on 4 connections, $MOCK_HEADS, $(date -u +%Y-%m-%dT%H:%MZ)):"
printf '%-40s %10s\n' "nginx (proxy_pass, one worker)" "$(per "$nginx_ir")"
for f in $FLOORS; do
  printf '%-40s %10s\n' "$(floor_label "$f")" "$(per "$(total "$work/floor-$f.cg.1")")"
done
printf '%-40s %10s\n' "gateway, I/O threads (request path)" "$(per "${gw_io:-0}")"
printf '%-40s %10s\n' "gateway, whole process" "$(per "$gw_ir")"
printf '%-40s %10s\n' "gateway + quota pool, I/O threads" "$(per "$(io_threads "$work/pool.cg.1")")"
printf '%-40s %10s\n' "gateway + quota pool, whole process" "$(per "$(total "$work/pool.cg.1")")"
echo "callgrind files: $work/{nginx,gateway,pool}.cg.1, $work/floor-*.cg.1"
