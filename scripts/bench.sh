#!/usr/bin/env bash
# Benchmarks: each prints one JSON line. Long; not part of the test suite.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
for bench in "$ROOT"/bench/*.py; do
  say "bench: $(basename "$bench")"
  "$VENV/bin/python" "$bench" 2>>"$ROOT/bench/bench.log"
done
