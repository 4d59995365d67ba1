#!/usr/bin/env bash
# Soak: a fixed rate of streaming and non-streaming chat requests from three keys through
# a combo over two connections of the mock with a quota pool covering both, for DURATION,
# with gates that fail the run. The load is open loop: one oha per (key, streaming or
# not) at RATE req/s with latency correction (a late request counts from when it was
# due), and the same load sent straight to the mock alongside, so "added" latency is the
# gateway's p95 minus the mock's, measured in the same seconds. Prints a table of every
# figure with its gate and PASS/FAIL, and exits 1 when any gate fails.
#
#   bench/soak.sh                                        # release build, 10 minutes
#   DURATION=30m bench/soak.sh
#   PROFILE=debug BIN=target/debug/switchyard DURATION=1m bench/soak.sh   # what CI runs
#
# The gates (environment, defaults for PROFILE=release / PROFILE=debug):
#   ADDED_P95_MS      p95 latency added by the gateway, worst key, per kind   25 / 60
#   ERROR_RATE_MAX    answers other than 200, and failed requests             0.001
#   RSS_GROWTH_MIB    RSS peak of the last window minus that of the first     8 / 12
#   FD_MAX            open file descriptors, highest sample       6 × CONNS + 160 (256)
#   FD_GROWTH_MAX     fd peak of the last window minus that of the first      16
# and exact ones: the in-flight gauge and the open quota reservations are 0 after the
# load, no request went unmetered, the request log has one row per request sent and
# dropped none, and the pool's consumption per key (requests and tokens) is what the 200
# answers carried in their usage. The windows are the first and last
# minute of the load, or its first and last quarter when it is shorter than 5 minutes
# (15 s each for CI's one minute); below a minute the growth figures are printed without
# a verdict, as the first window is then mostly oha opening its connections.
#
# BIN picks the binary (no build); otherwise PROFILE (release) is built, with CARGO as
# the build command (e.g. CARGO="flock /tmp/build.lock cargo"). oha is installed as
# bench/lib.sh says. Ports 1929x on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DURATION=${DURATION:-10m}
PROFILE=${PROFILE:-release}
RATE=${RATE:-10}             # req/s per key and kind: 6 × RATE through the gateway
CONNS=${CONNS:-16}           # oha connections per process (the most requests it has open)
CHUNKS=${CHUNKS:-16}         # the mock's answer: words (tokens, stream deltas)
CHUNK_MS=${CHUNK_MS:-10}     # between stream deltas
LATENCY_MS=${LATENCY_MS:-10} # before the mock's response headers
MOCK_PORT=19290 GW_PORT=19292
ADMIN=soak-admin-token-0123456789
KEYS="alice bob carol"

case $PROFILE in
  release) gate_p95=25 gate_rss=8 ;;
  debug) gate_p95=60 gate_rss=12 ;;
  *) echo "PROFILE is release or debug, not $PROFILE" >&2; exit 2 ;;
esac
export ADDED_P95_MS=${ADDED_P95_MS:-$gate_p95}
export ERROR_RATE_MAX=${ERROR_RATE_MAX:-0.001}
export RSS_GROWTH_MIB=${RSS_GROWTH_MIB:-$gate_rss}
export FD_MAX=${FD_MAX:-$((6 * CONNS + 160))}
export FD_GROWTH_MAX=${FD_GROWTH_MAX:-16}

seconds() { # 90 | 90s | 10m | 1h → seconds
  case $1 in
    *h) echo $(( ${1%h} * 3600 )) ;;
    *m) echo $(( ${1%m} * 60 )) ;;
    *s) echo $(( ${1%s} )) ;;
    *) echo $(( $1 )) ;;
  esac
}
secs=$(seconds "$DURATION")

source "$root/bench/lib.sh"
ensure_oha
if [ -z "${BIN:-}" ]; then
  if [ "$PROFILE" = release ]; then ${CARGO:-cargo} build --release -q -p switchyard
  else ${CARGO:-cargo} build -q -p switchyard; fi
  BIN=$root/target/$PROFILE/switchyard
fi

setup_work

key_secret() { echo "sy-soak-key-$1-000000000000000000"; }

cat > "$work/switchyard.toml" <<TOML
[server]
listen = "127.0.0.1:$GW_PORT"
data_dir = "$work/data"
admin_token = "$ADMIN"

[[providers]]
id = "soak"
format = "openai"
base_url = "http://127.0.0.1:$MOCK_PORT"

# Four requests at a time on the first account: the rest of the combo's traffic is passed
# over to the second.
[[connections]]
id = "soak-1"
provider = "soak"
auth_class = "apikey"
credential = "soak-upstream-credential-1"
max_concurrent = 4

[[connections]]
id = "soak-2"
provider = "soak"
auth_class = "apikey"
credential = "soak-upstream-credential-2"

[[combos]]
name = "soak"
strategy = "priority"
targets = [{ model = "soak/mock-small", connection = "soak-1" }, { model = "soak/mock-small", connection = "soak-2" }]

# Limits no run reaches (daily windows: runs up to a day are counted whole).
[[quota_pools]]
id = "soak"
name = "soak"
connection_ids = ["soak-1", "soak-2"]
dimensions = [
  { unit = "requests", window = "daily", limit = 1000000000 },
  { unit = "tokens", window = "daily", limit = 1000000000000 },
]
allocations = [
  { api_key_id = "alice", allocation_weight = 50, policy = "hard" },
  { api_key_id = "bob", allocation_weight = 30, policy = "soft" },
  { api_key_id = "carol", allocation_weight = 20, policy = "burst" },
]
TOML
for k in $KEYS; do
  printf '\n[[keys]]\nid = "%s"\nname = "%s"\nsecret = "%s"\nallowed_models = ["soak"]\n' \
    "$k" "$k" "$(key_secret "$k")" >> "$work/switchyard.toml"
done

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)
SWITCHYARD_LOG=warn "$BIN" serve --config "$work/switchyard.toml" > "$work/gw.log" 2>&1 & gw=$!
pids+=($gw)
wait_port $MOCK_PORT; wait_port $GW_PORT
curl -sf -o /dev/null http://127.0.0.1:$MOCK_PORT/_mock/rules -H 'content-type: application/json' \
  -d "{\"latency_ms\": $LATENCY_MS, \"chunks\": $CHUNKS, \"chunk_interval_ms\": $CHUNK_MS}"

# The streaming body asks for the usage chunk, as the OpenAI clients do when told to.
body() { # model stream
  if [ "$2" = true ]; then
    printf '{"model":"%s","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"soak test, streaming"}]}' "$1"
  else
    printf '{"model":"%s","stream":false,"messages":[{"role":"user","content":"soak test, one answer"}]}' "$1"
  fi
}
for kind in stream plain; do
  [ $kind = stream ] && s=true || s=false
  body soak $s > "$work/body-$kind.json"
  body mock-small $s > "$work/body-mock-$kind.json"
done

# VmRSS (KiB) and open fds of the gateway, every second until it is stopped.
( while :; do
    printf '%s %s %s\n' "$(date +%s.%N)" "$(awk '/^VmRSS:/ {print $2}' /proc/$gw/status)" \
      "$(find /proc/$gw/fd -mindepth 1 -maxdepth 1 | wc -l)"
    sleep 1
  done > "$work/samples.txt" 2>/dev/null ) & sampler=$!
pids+=($sampler)
sleep 2  # the idle samples

load() { # name port body-file token
  "$OHA" --no-tui --output-format json -m POST -H "content-type: application/json" \
    -H "authorization: Bearer $4" -D "$3" -q "$RATE" --latency-correction -z "${secs}s" -w \
    -c "$CONNS" "http://127.0.0.1:$2/v1/chat/completions" > "$work/oha-$1.json" 2> "$work/oha-$1.err"
}

echo "Soak: $DURATION, $PROFILE binary $BIN; $RATE req/s per key and kind ($((6 * RATE)) req/s through the gateway), work dir $work" >&2
loaders=()
started=$(date +%s.%N)
for k in $KEYS; do
  for kind in stream plain; do
    load "gw-$k-$kind" $GW_PORT "$work/body-$kind.json" "$(key_secret "$k")" & loaders+=($!)
  done
done
for kind in stream plain; do
  load "mock-$kind" $MOCK_PORT "$work/body-mock-$kind.json" upstream & loaders+=($!)
done
pids+=("${loaders[@]}")
for p in "${loaders[@]}"; do wait "$p"; done
ended=$(date +%s.%N)
if ! kill -0 $gw 2>/dev/null; then
  echo "FAIL: the gateway exited during the load; its log:" >&2
  tail -n 20 "$work/gw.log" >&2
  exit 1
fi

python3 bench/soak.py "$work" $GW_PORT "$ADMIN" "$started" "$ended" "$secs" "$CHUNKS" \
  "$KEYS" "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, oha $OHA_VERSION, $PROFILE binary"
