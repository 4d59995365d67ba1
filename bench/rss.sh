#!/usr/bin/env bash
# Memory benchmark: the gateway's resident memory (VmRSS) idle, at the peak of waves of
# concurrent streaming requests, right after each wave has ended and after a few idle
# seconds, to see what it keeps and whether it grows from wave to wave. The mock provider
# streams CHUNKS chunks CHUNK_MS apart, so every stream of a wave is in flight at once.
# Not part of CI: figures belong here and in README, not in tests.
#
#   bench/rss.sh                            # 3 waves of 1000 streams (about 30 s after the build)
#   WAVES=5 CONCURRENCY=2000 SETTLE=60 bench/rss.sh
#   MIMALLOC_PURGE_DELAY=0 bench/rss.sh     # the environment reaches the gateway as is
#
# CARGO overrides the build command (e.g. CARGO="flock /tmp/build.lock nice cargo").
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

${CARGO:-cargo} build --release -q -p switchyard
BIN=$root/target/release/switchyard

source "$root/bench/lib.sh"

setup_work

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)
gateway_config $GW_PORT "$work/data" > "$work/switchyard.toml"
SWITCHYARD_LOG=warn "$BIN" serve --config "$work/switchyard.toml" > "$work/gw.log" 2>&1 & gw=$!
pids+=($gw)
wait_port $MOCK_PORT; wait_port $GW_PORT
curl -sf -o /dev/null http://127.0.0.1:$MOCK_PORT/_mock/rules -H 'content-type: application/json' \
  -d "{\"chunks\": $CHUNKS, \"chunk_interval_ms\": $CHUNK_MS}"
sleep 2  # let start-up work (migrations, first config poll) settle before the idle sample

mimalloc_env=$(env | grep -i '^mimalloc_' | tr '\n' ' ' || true)
echo "Switchyard memory benchmark — $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, ${mimalloc_env:-mimalloc defaults}"
echo "$WAVES waves of $CONCURRENCY concurrent streams ($CHUNKS chunks, ${CHUNK_MS} ms apart; one connection each), $IDLE s idle after each"
python3 bench/rss.py $gw 127.0.0.1 $GW_PORT "$KEY" bench/mock-small $MOCK_PORT \
  "$WAVES" "$CONCURRENCY" "$IDLE" "$SETTLE"
