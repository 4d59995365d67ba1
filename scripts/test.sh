#!/usr/bin/env bash
# The project's test command. Prepares what the tests need on a fresh machine — a Redis
# for the quota-store tests and a Python virtualenv with the official `openai` and
# `anthropic` clients, `selenium` for the dashboard's browser test and `schemathesis`
# for the API schema suite (pinned in crates/switchyard-gateway/tests/requirements.txt)
# — then runs the whole
# suite. Extra arguments go to `cargo test` (e.g. `scripts/test.sh -p switchyard-core`).
#
# PostgreSQL: every store test and the replica tests run on it too; see
# scripts/postgres.sh.
#
# Redis: the tests use SWITCHYARD_TEST_REDIS_URL. When it is not set, a Redis answering
# on 127.0.0.1:6379 is used; when none answers there, a throwaway `redis-server` (no
# persistence) is started on a free port and stopped when the script exits. Without
# either, the script stops before building.
#
# After the whole suite, the end-to-end suite runs once more on PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."

# Whether a Redis answers PING on host $1, port $2.
redis_answers() {
  local reply=""
  { exec 3<>"/dev/tcp/$1/$2"; } 2>/dev/null || return 1
  printf 'PING\r\n' >&3
  IFS= read -r -t 2 reply <&3 || true
  exec 3<&- 3>&-
  [ "${reply%$'\r'}" = "+PONG" ]
}

if [ -z "${SWITCHYARD_TEST_REDIS_URL:-}" ]; then
  if redis_answers 127.0.0.1 6379; then
    export SWITCHYARD_TEST_REDIS_URL=redis://127.0.0.1:6379
  elif command -v redis-server >/dev/null; then
    redis_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    redis_dir=$(mktemp -d)
    redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$redis_dir" \
      --save '' --appendonly no > "$redis_dir/redis.log" 2>&1 &
    redis_pid=$!
    trap 'kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; rm -rf "$redis_dir"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    for _ in $(seq 100); do
      redis_answers 127.0.0.1 "$redis_port" && break
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.1
    done
    if ! redis_answers 127.0.0.1 "$redis_port"; then
      echo "error: no Redis on 127.0.0.1:6379, and the throwaway redis-server on port $redis_port did not start: $(tail -n 1 "$redis_dir/redis.log")" >&2
      exit 1
    fi
    echo "No Redis on 127.0.0.1:6379: started a throwaway redis-server on 127.0.0.1:$redis_port for the tests (stopped on exit)."
    export SWITCHYARD_TEST_REDIS_URL="redis://127.0.0.1:$redis_port"
  else
    echo "error: the tests need Redis: none answers on 127.0.0.1:6379 and redis-server is not installed (install it, or set SWITCHYARD_TEST_REDIS_URL)" >&2
    exit 1
  fi
fi

# PostgreSQL: the tests use SWITCHYARD_TEST_POSTGRES_URL (scripts/postgres.sh says how
# it is found, started or installed).
source scripts/postgres.sh
ensure_postgres

requirements=crates/switchyard-gateway/tests/requirements.txt
stamp=.venv/.requirements
if [ ! -x .venv/bin/python ] || ! cmp -s "$requirements" "$stamp"; then
  echo "Setting up .venv with the Python test clients..."
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi
export SWITCHYARD_TEST_PYTHON="$PWD/.venv/bin/python"

cargo test --workspace --locked "$@"

# The end-to-end suite once more, on PostgreSQL (SPEC O6: the same suite on both
# databases): every harness gets a PostgreSQL database of its own. Skipped when the
# caller picked tests with arguments.
if [ $# -eq 0 ]; then
  echo "The end-to-end suite on PostgreSQL:"
  SWITCHYARD_TEST_DATABASE=postgres cargo test --locked -p switchyard-gateway --test e2e
fi
