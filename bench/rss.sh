#!/usr/bin/env bash
# Memory benchmark: the gateway's resident memory (VmRSS) idle, at the peak of waves of
# concurrent streaming requests, right after each wave has ended and after a few idle
# seconds, to see what it keeps and whether it grows from wave to wave. The mock provider
# streams CHUNKS chunks CHUNK_MS apart, so every stream of a wave is in flight at once.
# Not part of CI: the bounds are checked by crates/switchyard/tests/memory.rs (run by
# scripts/test.sh), the same waves on the debug binary with its upstream connections
# closed after each stream; this script prints the figures, with the pool, for any size.
#
#   bench/rss.sh                            # 3 waves of 1000 streams (about 30 s after the build)
#   WAVES=5 CONCURRENCY=2000 SETTLE=60 bench/rss.sh
#   MIMALLOC_PURGE_DELAY=0 bench/rss.sh     # the environment reaches the gateway as is
#   WAVES=10 CONCURRENCY=2000 CHUNKS=3 CHUNK_MS=2000 UPSTREAM_CLOSE=1 MIMALLOC_PURGE_DELAY=0 \
#     BIN=target/debug/switchyard bench/rss.sh   # the memory test's conditions, larger
#
# UPSTREAM_CLOSE=1 makes the mock answer with `connection: close`, so no upstream
# connection is pooled. BIN picks the binary (no build); otherwise the release build is
# made, with CARGO as the build command (e.g. CARGO="flock /tmp/build.lock nice cargo").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
WAVES=${WAVES:-3}
CONCURRENCY=${CONCURRENCY:-1000}
CHUNKS=${CHUNKS:-40}
CHUNK_MS=${CHUNK_MS:-50}
IDLE=${IDLE:-5}
SETTLE=${SETTLE:-0}  # one more sample this many seconds after the last (60: past the upstream pool's idle timeout)
MOCK_PORT=19190 GW_PORT=19192
KEY=sy-bench-key-000000000000000000000001

if [ -z "${BIN:-}" ]; then
  ${CARGO:-cargo} build --release -q -p switchyard
  BIN=$root/target/release/switchyard
fi

source "$root/bench/lib.sh"

setup_work

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)
gateway_config $GW_PORT "$work/data" > "$work/switchyard.toml"
SWITCHYARD_LOG=warn "$BIN" serve --config "$work/switchyard.toml" > "$work/gw.log" 2>&1 & gw=$!
pids+=($gw)
wait_port $MOCK_PORT; wait_port $GW_PORT
close=""
[ "${UPSTREAM_CLOSE:-0}" = 1 ] && close=', "headers": {"connection": "close"}'
curl -sf -o /dev/null http://127.0.0.1:$MOCK_PORT/_mock/rules -H 'content-type: application/json' \
  -d "{\"chunks\": $CHUNKS, \"chunk_interval_ms\": $CHUNK_MS$close}"
sleep 2  # let start-up work (migrations, first config poll) settle before the idle sample

mimalloc_env=$(env | grep -i '^mimalloc_' | tr '\n' ' ' || true)
echo "Switchyard memory benchmark — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, ${mimalloc_env:-mimalloc defaults}"
echo "$WAVES waves of $CONCURRENCY concurrent streams ($CHUNKS chunks, ${CHUNK_MS} ms apart; one connection each), $IDLE s idle after each"
python3 bench/rss.py $gw 127.0.0.1 $GW_PORT "$KEY" bench/mock-small $MOCK_PORT \
  "$WAVES" "$CONCURRENCY" "$IDLE" "$SETTLE"
