"""Benchmark: SIGKILLs during an incremental snapshot of a large table under a live workload.

:mod:`harness.faults.postgres_incremental`'s scenario at scale: a throwaway PostgreSQL server, a
table of ``--rows`` rows (3,000,000 by default) snapshotted with ``snapshot=incremental`` in
chunks of ``--chunk-rows`` while a workload writes to it, the driver SIGKILLed ``--kills`` times
while an executor reads a chunk, a last run to the end, then the checks (the change log replays
to the table, every transaction whole, what each restart read again). The test suite runs a small
instance of the same scenario (``tests/integration/test_postgres_incremental_crash.py``).

Prints one JSON line. Run: ``scripts/bench.sh pg_incremental_crash`` (or ``python
bench/pg_incremental_crash.py --rows 3000000``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from harness.faults.postgres_incremental import run_scenario
from harness.servers.postgres import PgCluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--plugin", default="pgoutput")
    args = parser.parse_args()

    import spark_ckpt

    workdir = Path(tempfile.mkdtemp(prefix="pg-incremental-crash-"))
    cluster = PgCluster(tempfile.mkdtemp(prefix="pg-incremental-server-")).start()
    try:
        spark = spark_ckpt.local_session("pg-incremental-crash-check")
        result = run_scenario(
            spark, cluster.dsn(), workdir, args.plugin, args.rows, args.chunk_rows, args.kills
        )
        print(json.dumps({"bench": "pg_incremental_crash", **result}), flush=True)
        spark.stop()
    finally:
        cluster.stop()
        shutil.rmtree(cluster.workdir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
