#!/usr/bin/env bash
# Instructions per request under load, counted by valgrind's callgrind: the gateway's
# I/O threads (the request path) and its whole process, which adds the request log's
# writer. bench/instructions.sh sends one request at a time, so the writer's batches
# hold a few rows; here the load of bench/run.sh's throughput rounds (32 connections,
# no rate limit) fills them with hundreds, as on a busy gateway, and the writer's cost
# per row is the one that competes with requests for the cores. Not part of CI.
#
#   bench/loaded.sh                   # 1 000 warm-up requests, then 10 000 counted
#   REQUESTS=20000 CONNS=64 bench/loaded.sh
#
# Prints, per request: the request path, the whole process, and the request log's
# SQLite batch writes (per row: one row per request). The callgrind file stays in the
# printed directory for callgrind_annotate and bench/attribute.py.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
REQUESTS=${REQUESTS:-10000}
CONNS=${CONNS:-32}
MOCK_PORT=19290 GW_PORT=19292
KEY=sy-bench-key-000000000000000000000001

source "$root/bench/lib.sh"
ensure_commands valgrind
ensure_oha
build_targets

KEEP_WORK=1
setup_work
gateway_config $GW_PORT "$work/data" > "$work/switchyard.toml"

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)
mock_provider_fields
SWITCHYARD_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$work/gateway.cg" \
  "$BIN" serve --config "$work/switchyard.toml" > "$work/gateway-vg.log" 2>&1 & pids+=($!)
gateway_pid=$!
wait_port $MOCK_PORT; wait_port $GW_PORT

drive() { # requests
  "$OHA" --no-tui --output-format json -m POST \
    -H "content-type: application/json" -H "authorization: Bearer $KEY" \
    -d '{"model":"bench/mock-small","stream":false,"messages":[{"role":"user","content":"benchmark"}]}' \
    -n "$1" -c "$CONNS" "http://127.0.0.1:$GW_PORT/v1/chat/completions" |
    python3 -c 'import json,sys; c=json.load(sys.stdin).get("statusCodeDistribution",{}); sys.exit(0 if set(c)=={"200"} else f"non-200 answers: {c}")'
}
drive 1000
callgrind_control -z $gateway_pid > /dev/null 2>&1
drive "$REQUESTS"
# The writer lingers before a batch: let the last rows land before counting.
sleep 2
callgrind_control -d $gateway_pid > /dev/null 2>&1
sleep 1

annotated=$(callgrind_annotate --inclusive=yes --threshold=100 "$work/gateway.cg.1" 2>/dev/null)
first() { # pattern: the inclusive count of the first line matching it
  awk -v p="$1" '$0 ~ p && !n++ {gsub(",", "", $1); print $1}' <<< "$annotated"
}
per() { python3 -c "print(round(${1:-0} / $REQUESTS))"; }
echo
echo "Instructions per request under load (callgrind, $REQUESTS requests on $CONNS connections, $MOCK_HEADS, $(date -u +%Y-%m-%dT%H:%MZ)):"
printf '%-40s %10s\n' "gateway, I/O threads (request path)" \
  "$(per "$(first '(switchyard-gateway/src/server.rs|runtime/scheduler/current_thread/mod.rs):std::sys::backtrace::__rust_begin_short_backtrace')")"
printf '%-40s %10s\n' "gateway, whole process" "$(per "$(first 'PROGRAM TOTALS')")"
printf '%-40s %10s\n' "request log's SQLite writes (per row)" "$(per "$(first 'insert_log_batch [[]')")"
echo "callgrind file: $work/gateway.cg.1"
