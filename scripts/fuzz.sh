#!/usr/bin/env bash
# Fuzzing (SPEC R20): builds every cargo-fuzz target of fuzz/ — instrumented, on the
# stable toolchain, without a sanitizer — seeds each corpus from the golden files, the
# end-to-end bodies and the mock provider's answers, and runs each target for SECONDS
# (default 10). Every crash, leak or hang is saved by libFuzzer under
# fuzz/artifacts/<target>/; the script goes on with the other targets and fails at the
# end, naming each. Keep a crash as a regression test by copying its input into
# fuzz/regressions/<target>/ (crates/switchyard-fuzz/tests/corpus.rs replays them all).
#
#   scripts/fuzz.sh                 # every target, 10 s each (CI)
#   scripts/fuzz.sh 1800            # every target, 30 minutes each
#   FUZZ_TARGETS="translate_stream gateway" scripts/fuzz.sh 600
#
# New interesting inputs accumulate in fuzz/corpus/<target>/ (not committed), so a
# longer run later starts where the last one stopped. Installs cargo-fuzz when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "Installing cargo-fuzz..."
  cargo install cargo-fuzz --locked --quiet
fi

# The seeds, written by an ignored test, built as the whole suite is (so nothing is
# built again after scripts/test.sh).
SWITCHYARD_FUZZ_CORPUS=$PWD/fuzz/corpus cargo test --quiet --locked --workspace \
  --test corpus -- --ignored --exact write_seed_corpus

# The instrumented build (its own target directory, fuzz/target).
(cd fuzz && cargo fuzz build --sanitizer none)

targets=${FUZZ_TARGETS:-$(cd fuzz && cargo fuzz list)}
failed=()
for target in $targets; do
  mkdir -p "fuzz/regressions/$target"
  echo "== $target: ${seconds} s"
  # -timeout: an input taking longer than this is a hang; -rss_limit_mb: a leak.
  log=fuzz/artifacts/$target.log
  mkdir -p fuzz/artifacts
  if (cd fuzz && cargo fuzz run --sanitizer none "$target" \
      "corpus/$target" "regressions/$target" -- \
      -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 -max_len=65536 \
      -print_final_stats=1) > "$log" 2>&1; then
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ *DONE)' "$log" || true
  else
    tail -n 60 "$log"
    failed+=("$target")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found crashes in: ${failed[*]} (inputs under fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzzing: every target ran ${seconds} s without a crash"
