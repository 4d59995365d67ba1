#!/usr/bin/env bash
# The project's test command. Prepares what the tests need on a fresh machine — a
# Python virtualenv with the official `openai` client (pinned in
# crates/switchyard-gateway/tests/requirements.txt) — then runs the whole suite.
# Extra arguments go to `cargo test` (e.g. `scripts/test.sh -p switchyard-core`).
set -euo pipefail
cd "$(dirname "$0")/.."

requirements=crates/switchyard-gateway/tests/requirements.txt
stamp=.venv/.requirements
if [ ! -x .venv/bin/python ] || ! cmp -s "$requirements" "$stamp"; then
  echo "Setting up .venv with the Python test client..."
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi
export SWITCHYARD_TEST_PYTHON="$PWD/.venv/bin/python"

cargo test --workspace --locked "$@"
