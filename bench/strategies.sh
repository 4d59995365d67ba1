#!/usr/bin/env bash
# The cost of each routing strategy's fact gathering (SPEC R19), counted by callgrind:
# one gateway with two connections and a combo per strategy over them, each driven in
# turn at a low fixed rate, its request path's instructions per request printed beside
# the `priority` combo's (which gathers nothing here: no quota pool). The difference is
# what the strategy's gatherers and its ordering cost. Instruction counts repeat for the
# same binary and load whatever else the machine is doing. Not part of CI.
#
#   bench/strategies.sh                 # 500 requests per strategy at 100 req/s
#   REQUESTS=2000 bench/strategies.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
REQUESTS=${REQUESTS:-500}
MOCK_PORT=19290 GW_PORT=19292
KEY=sy-bench-key-000000000000000000000001
# The registry's names (switchyard_core::routing::strategy::REGISTRY); a name the
# gateway does not know stops it at start, so this list cannot silently go stale.
# pipeline and fusion make two and three upstream calls per request (their figure is
# mostly those calls); context-relay makes one (no session here, so no summary).
STRATEGIES=(priority weighted round-robin fill-first random strict-random cost-optimized
  p2c least-used cache-optimized headroom reset-window reset-aware lkgp context-optimized auto
  pipeline fusion context-relay)

source "$root/bench/lib.sh"
ensure_commands valgrind
ensure_oha
cargo build --release -q -p switchyard
BIN=$root/target/release/switchyard

KEEP_WORK=1  # the callgrind files stay for callgrind_annotate
setup_work

{
  gateway_config $GW_PORT "$work/data"
  cat <<TOML

[[connections]]
id = "bench-2"
provider = "bench"
auth_class = "apikey"
credential = "bench-upstream-credential-2"
TOML
  for s in "${STRATEGIES[@]}"; do
    cat <<TOML

[[combos]]
name = "s-$s"
strategy = "$s"
targets = [{ model = "bench/mock-small", connection = "bench-1", cost = 1.0 }, { model = "bench/mock-small", connection = "bench-2", cost = 2.0 }]
TOML
  done
} > "$work/switchyard.toml"

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)
SWITCHYARD_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$work/gateway.cg" \
  "$BIN" serve --config "$work/switchyard.toml" > "$work/gateway-vg.log" 2>&1 & pids+=($!)
gateway_pid=$!
wait_port $MOCK_PORT; wait_port $GW_PORT

drive() { # model requests extra-oha-args...
  local model=$1 n=$2; shift 2
  "$OHA" --no-tui --output-format json -m POST \
    -H "content-type: application/json" -H "authorization: Bearer $KEY" \
    -d "{\"model\":\"$model\",\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"benchmark\"}]}" \
    -n "$n" -c 4 "$@" "http://127.0.0.1:$GW_PORT/v1/chat/completions" |
    python3 -c 'import json,sys; c=json.load(sys.stdin).get("statusCodeDistribution",{}); sys.exit(0 if set(c)=={"200"} else f"non-200 answers: {c}")'
}

# The I/O threads' entry point, as in bench/instructions.sh.
io_threads() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk '/(switchyard-gateway\/src\/server.rs|runtime\/scheduler\/current_thread\/mod.rs):std::sys::backtrace::__rust_begin_short_backtrace/ && !n++ {gsub(",", "", $1); print $1}'
}

# Every dump numbers its file: .cg.1 for the first strategy, and so on.
drive s-priority 300
for s in "${STRATEGIES[@]}"; do
  drive "s-$s" 100
  callgrind_control -z $gateway_pid > /dev/null 2>&1
  drive "s-$s" "$REQUESTS" -q 100
  callgrind_control -d $gateway_pid > /dev/null 2>&1
done
sleep 1

echo
echo "Request-path instructions per request by strategy (callgrind, $REQUESTS requests each at 100 req/s on 4 connections, two candidates, $(date -u +%Y-%m-%dT%H:%MZ)):"
printf '%-20s %10s %10s\n' strategy "per request" "vs priority"
base=
i=1
for s in "${STRATEGIES[@]}"; do
  ir=$(io_threads "$work/gateway.cg.$i")
  per=$(python3 -c "print(round(${ir:-0} / $REQUESTS))")
  i=$((i + 1))
  [ -n "$base" ] || base=$per
  printf '%-20s %10s %+10d\n' "$s" "$per" "$((per - base))"
done
echo "callgrind files: $work/gateway.cg.*"
