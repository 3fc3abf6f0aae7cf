#!/usr/bin/env bash
# Benchmarks: each prints one JSON line (stderr goes to bench/bench.log). Long; not part of the
# test suite. `scripts/bench.sh` runs them all; `scripts/bench.sh NAME [ARGS...]` runs one with
# its arguments, e.g. `scripts/bench.sh sink_throughput --store s3`.
set -euo pipefail
export SPARK_CKPT_POSTGRES=1  # postgres_cdc needs PostgreSQL with wal2json (installed if missing)
# The "test" extra brings moto, the S3-protocol server behind `--store s3`.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" test
ALL=(source_throughput sink_throughput crash_matrix postgres_cdc pg_large_txn mysql_large_txn pg_incremental_crash debezium_vs_spark_json spark_batch_overhead postgres_vs_debezium mysql_vs_debezium kafka_vs_spark_kafka batch_latency freshness listener_cost)
run() {
  local bench="$1"; shift
  [ -f "$ROOT/bench/$bench.py" ] || die "no benchmark bench/$bench.py (one of: ${ALL[*]})"
  say "bench: $bench $*"
  # A benchmark imports the test harness (the package `harness`: tests/ is on sys.path through the
  # .pth file setup.sh writes) and its siblings in bench/ (passthrough.py, postgres_cdc.py) the
  # way any script does: its own directory is first on sys.path, unless PYTHONSAFEPATH (which
  # setup.sh exports for the tests) is set. So it runs without; spark_ckpt.local_session sets it
  # again for Spark's Python workers, and the harness sets it for the drivers it starts.
  env -u PYTHONSAFEPATH "$VENV/bin/python" "$ROOT/bench/$bench.py" "$@" 2>>"$ROOT/bench/bench.log"
}
if [ "$#" -gt 0 ]; then
  run "$@"
else
  for bench in "${ALL[@]}"; do run "$bench"; done
fi
