#!/usr/bin/env bash
# One replica on PostgreSQL against the same gateway on SQLite (SPEC O6, issue 27 point
# 10): the request path reads neither database, so both must cost the same. Prints, per
# backend, instructions per request (callgrind: the I/O threads, i.e. the request path,
# and the whole process, which adds the request-log writer) and requests/s at 32
# connections (oha, ROUNDS interleaved rounds, medians; the gateway with a quota pool, as
# in bench/run.sh). Not part of CI.
#
#   bench/database.sh                       # PostgreSQL on 127.0.0.1:5432 as postgres
#   PG=postgres://u@host:5432 bench/database.sh
#   REQUESTS=5000 ROUNDS=5 DURATION=10s bench/database.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
REQUESTS=${REQUESTS:-2000}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
MOCK_PORT=19290 SQLITE_PORT=19291 PG_PORT=19292
KEY=sy-bench-key-000000000000000000000001

source "$root/bench/lib.sh"
ensure_commands valgrind
ensure_oha
cargo build --release -q -p switchyard
BIN=$root/target/release/switchyard

KEEP_WORK=1
setup_work
db=sybench_$$
psql "$PG/postgres" -qc "CREATE DATABASE $db" >/dev/null
trap 'cleanup_work; psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT
export SWITCHYARD_SECRET_KEY
SWITCHYARD_SECRET_KEY=$("$BIN" secret-key generate)
SWITCHYARD_DATABASE_URL="$PG/$db" "$BIN" migrate > /dev/null

pool_gateway_config $SQLITE_PORT "$work/data-sqlite" > "$work/sqlite.toml"
pool_gateway_config $PG_PORT "$work/data-pg" > "$work/pg.toml"

"$BIN" mock --listen 127.0.0.1:$MOCK_PORT > "$work/mock.log" 2>&1 & pids+=($!)
wait_port $MOCK_PORT

drive() { # port requests extra-oha-args...
  local port=$1 n=$2; shift 2
  "$OHA" --no-tui --output-format json -m POST \
    -H "content-type: application/json" -H "authorization: Bearer $KEY" \
    -d '{"model":"bench/mock-small","stream":false,"messages":[{"role":"user","content":"benchmark"}]}' \
    -n "$n" -c 4 "$@" "http://127.0.0.1:$port/v1/chat/completions" |
    python3 -c 'import json,sys; c=json.load(sys.stdin).get("statusCodeDistribution",{}); sys.exit(0 if set(c)=={"200"} else f"non-200 answers: {c}")'
}
rate() { # port
  "$OHA" --no-tui --output-format json -m POST \
    -H "content-type: application/json" -H "authorization: Bearer $KEY" \
    -d '{"model":"bench/mock-small","stream":false,"messages":[{"role":"user","content":"benchmark"}]}' \
    -z "$DURATION" -c 32 "http://127.0.0.1:$1/v1/chat/completions" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); c=d.get("statusCodeDistribution",{}); assert set(c)=={"200"}, c; print(round(d["summary"]["requestsPerSec"]))'
}
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }
io_threads() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk '/(switchyard-gateway\/src\/server.rs|runtime\/scheduler\/current_thread\/mod.rs):std::sys::backtrace::__rust_begin_short_backtrace/ && !n++ {gsub(",", "", $1); print $1}'
}
per() { python3 -c "print(round($1 / $REQUESTS))"; }

# Instructions: both under callgrind at once, each driven alone at a low fixed rate.
SWITCHYARD_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$work/sqlite.cg" \
  "$BIN" serve --config "$work/sqlite.toml" > "$work/sqlite-vg.log" 2>&1 & pids+=($!)
sqlite_pid=$!
SWITCHYARD_LOG=warn SWITCHYARD_DATABASE_URL="$PG/$db" valgrind --tool=callgrind --callgrind-out-file="$work/pg.cg" \
  "$BIN" serve --config "$work/pg.toml" > "$work/pg-vg.log" 2>&1 & pids+=($!)
pg_pid=$!
wait_port $SQLITE_PORT; wait_port $PG_PORT
measure() { # pid port
  drive "$2" 300
  callgrind_control -z "$1" > /dev/null 2>&1
  drive "$2" "$REQUESTS" -q 100
  callgrind_control -d "$1" > /dev/null 2>&1
}
measure $sqlite_pid $SQLITE_PORT
measure $pg_pid $PG_PORT
sleep 1
kill $sqlite_pid $pg_pid; wait $sqlite_pid $pg_pid 2>/dev/null || true

# Throughput: natively, one gateway at a time, rounds interleaved.
SWITCHYARD_LOG=warn "$BIN" serve --config "$work/sqlite.toml" > "$work/sqlite.log" 2>&1 & pids+=($!)
SWITCHYARD_LOG=warn SWITCHYARD_DATABASE_URL="$PG/$db" "$BIN" serve --config "$work/pg.toml" > "$work/pg.log" 2>&1 & pids+=($!)
wait_port $SQLITE_PORT; wait_port $PG_PORT
drive $SQLITE_PORT 2000; drive $PG_PORT 2000
sqlite_rates=() pg_rates=()
for _ in $(seq "$ROUNDS"); do
  sqlite_rates+=("$(rate $SQLITE_PORT)")
  pg_rates+=("$(rate $PG_PORT)")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo
echo "One replica, SQLite against PostgreSQL ($(date -u +%Y-%m-%dT%H:%MZ); gateway with a quota pool):"
printf '%-12s %22s %22s %22s\n' "database" "instr/req, I/O threads" "instr/req, process" "req/s at 32 conns"
printf '%-12s %22s %22s %22s\n' "SQLite" "$(per "$(io_threads "$work/sqlite.cg.1")")" "$(per "$(total "$work/sqlite.cg.1")")" "$(median "${sqlite_rates[@]}") (${sqlite_rates[*]})"
printf '%-12s %22s %22s %22s\n' "PostgreSQL" "$(per "$(io_threads "$work/pg.cg.1")")" "$(per "$(total "$work/pg.cg.1")")" "$(median "${pg_rates[@]}") (${pg_rates[*]})"
echo "callgrind files: $work/{sqlite,pg}.cg.1"
