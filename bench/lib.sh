# Shared by the benchmark scripts: their scratch directory and clean-up, and the
# configurations of the targets they measure, so all measure the same nginx and the same
# gateways. Expects MOCK_PORT and KEY to be set.

# Makes the scratch directory $work and, on exit, stops every process whose pid is in
# $pids and an nginx whose pid file is in $work, then removes $work (kept with
# KEEP_WORK=1, for files the script points to).
setup_work() {
  work=$(mktemp -d)
  pids=()
  trap cleanup_work EXIT
}

cleanup_work() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # The pid file may go between the test and the read: nginx removes it as it exits.
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid" 2>/dev/null)" 2>/dev/null || true
  wait 2>/dev/null || true
  [ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$work"
}

# oha, the load generator, pinned so that its flags and JSON output stay the same: built
# from crates.io on first use into a cache outside the checkout, shared by every clone on
# the machine (a cold `cargo install` takes about four minutes on two cores). Sets $OHA.
# SWITCHYARD_BENCH_TOOLS moves the cache; CARGO overrides the build command.
OHA_VERSION=1.16.0
ensure_oha() {
  local tools=${SWITCHYARD_BENCH_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard-bench}
  OHA=$tools/bin/oha
  if [ ! -x "$OHA" ] || [ "$("$OHA" --version | awk '{print $2}')" != "$OHA_VERSION" ]; then
    echo "Installing oha $OHA_VERSION into $tools..." >&2
    ${CARGO:-cargo} install oha --version "$OHA_VERSION" --locked --force --root "$tools" >&2
  fi
}

# Installs the Debian package of each command that is missing (valgrind, nginx, strace).
ensure_commands() { # command...
  local missing=()
  for c in "$@"; do command -v "$c" >/dev/null || missing+=("$c"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The release gateway (and mock) and the floors, as the scripts measure them. Sets $BIN.
build_targets() {
  cargo build --release -q -p switchyard
  cargo build --release -q -p switchyard-gateway --example floors
  BIN=$root/target/release/switchyard
}

# The floors (crates/switchyard-gateway/examples/floors): the smallest proxies on tokio,
# one per way of serving and forwarding a request, with no pipeline. FLOORS picks some.
FLOORS=${FLOORS:-axum hyper in-task raw-client raw}
floor_label() { # variant
  case $1 in
    axum) echo "F1 floor: axum + hyper-util client" ;;
    hyper) echo "F2 floor: hyper h1 + hyper-util client" ;;
    in-task) echo "F4 floor: hyper h1 + in-task hyper conn" ;;
    raw-client) echo "F5 floor: hyper h1 + hand-written client" ;;
    raw) echo "F6 floor: hand-written server + client" ;;
  esac
}

wait_port() { # port
  for _ in $(seq 1 300); do
    (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "port $1 did not open" >&2; exit 1
}

# Makes the mock send, on every answer, the six rate-limit fields OpenAI's API sends on
# every answer, so each target reads and relays a real provider's head (the gateway
# records them for a connection in a quota pool). Waits for the mock's port.
# PROVIDER_FIELDS=0 leaves the mock's bare heads (the figures before 2026-12-07 20:00).
mock_provider_fields() {
  wait_port $MOCK_PORT
  MOCK_HEADS="the mock's heads: $([ "${PROVIDER_FIELDS:-1}" = 0 ] && echo bare || echo "OpenAI's six rate-limit fields")"
  [ "${PROVIDER_FIELDS:-1}" = 0 ] && return 0
  curl -sf -o /dev/null -X POST "http://127.0.0.1:$MOCK_PORT/_mock/rules" \
    -H 'content-type: application/json' \
    -d '{"headers": {"x-ratelimit-limit-requests": "10000", "x-ratelimit-limit-tokens": "30000000",
      "x-ratelimit-remaining-requests": "9999", "x-ratelimit-remaining-tokens": "29999000",
      "x-ratelimit-reset-requests": "6ms", "x-ratelimit-reset-tokens": "2ms"}}'
}

nginx_config() { # port work-dir head-lines (worker and process settings)
  cat <<NGINX
$3
pid $2/nginx.pid;
error_log $2/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream mock { server 127.0.0.1:$MOCK_PORT; keepalive 128; }
  server {
    listen 127.0.0.1:$1;
    location / {
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
NGINX
}

gateway_config() { # port data-dir
  cat <<TOML
[server]
listen = "127.0.0.1:$1"
data_dir = "$2"
admin_token = "bench-admin-token-0123456789"

[[providers]]
id = "bench"
format = "openai"
base_url = "http://127.0.0.1:$MOCK_PORT"

[[connections]]
id = "bench-1"
provider = "bench"
auth_class = "apikey"
credential = "bench-upstream-credential"

[[keys]]
id = "bench"
name = "bench"
secret = "$KEY"
TOML
}

# The same gateway with a quota pool on its connection: every request is decided on two
# dimensions, reserved, and settled (limits high enough never to block).
pool_gateway_config() { # port data-dir
  gateway_config "$1" "$2"
  cat <<TOML

[[quota_pools]]
id = "bench"
name = "bench"
connection_ids = ["bench-1"]
dimensions = [
  { unit = "requests", window = "hourly", limit = 1000000000 },
  { unit = "tokens", window = "daily", limit = 1000000000000 },
]
allocations = [{ api_key_id = "bench", allocation_weight = 100 }]
TOML
}
