#!/usr/bin/env bash
# The test suite: lint, types, unit tests (no JVM) and integration tests (real Spark + Delta).
# Sets up .venv and checks Java on first use. Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" test
cd "$ROOT"

say "ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .

say "cargo fmt, clippy and test (the connectors' native parts and what they share)"
for NATIVE in "$ROOT"/sources/native/Cargo.toml "$ROOT"/sources/*/native/Cargo.toml; do
  cargo fmt --manifest-path "$NATIVE" --check
  cargo clippy --quiet --manifest-path "$NATIVE" --all-targets -- -D warnings
  cargo test --quiet --release --manifest-path "$NATIVE"  # reuses the release build of pip install
done

say "mypy --strict on the installed packages"
# Checked as installed: sources/ and sinks/ only exist as spark_ckpt.sources / .sinks there.
(cd "$VENV" && "$VENV/bin/mypy" --config-file "$ROOT/pyproject.toml" -p spark_ckpt)
# The workers' launcher is a top-level module of the standard library only: checked as a file.
(cd "$VENV" && "$VENV/bin/mypy" --config-file "$ROOT/pyproject.toml" "$ROOT/spark_ckpt_python.py")

say "pytest (integration, then unit)"
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
# The slowest tests are printed at the end of every run, so growth is seen when it happens.
"$VENV/bin/pytest" -p no:cacheprovider --durations=10 "$@"

# With arguments (a test file, -k ...) only those run; without, the Connect tests run too.
if [ $# -eq 0 ]; then
    say "pytest tests/connect (through a Spark Connect server, in a process of its own)"
    "$VENV/bin/pytest" -p no:cacheprovider --durations=5 tests/connect
fi
