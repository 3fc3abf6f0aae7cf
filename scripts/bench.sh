#!/usr/bin/env bash
# Benchmarks: each prints one JSON line (stderr goes to bench/bench.log). Long; not part of the
# test suite. `scripts/bench.sh` runs them all; `scripts/bench.sh postgres_cdc` runs one.
set -euo pipefail
export SPARK_CKPT_POSTGRES=1  # postgres_cdc needs PostgreSQL with wal2json (installed if missing)
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
BENCHES=(source_throughput sink_throughput crash_matrix postgres_cdc)
[ "$#" -gt 0 ] && BENCHES=("$@")
for bench in "${BENCHES[@]}"; do
  [ -f "$ROOT/bench/$bench.py" ] || die "no benchmark bench/$bench.py (one of: source_throughput sink_throughput crash_matrix postgres_cdc)"
  say "bench: $bench"
  "$VENV/bin/python" "$ROOT/bench/$bench.py" 2>>"$ROOT/bench/bench.log"
done
