"""Benchmark: one huge transaction (a bulk UPDATE) through the postgres connector, memory watched.

Starts a throwaway PostgreSQL cluster, fills a table with ``--rows`` rows, creates a slot
(``snapshot=never``), runs ``UPDATE big SET v = ...`` over every row in one transaction, and
streams it with ``Trigger.availableNow`` into ``delta-2pc``, once per plugin. While it runs, every
process of the run (this Python driver, Spark's JVM, the Python process that runs the source's
planning, the Python workers that decode partitions) is sampled from ``/proc`` for its peak
resident memory (``VmHWM``). Checks that the transaction landed whole: one Delta version holds
all its rows, with one txn_id, txn_size = rows and every event index once.

Prints one JSON line per plugin::

    {"bench": "pg_large_txn", "plugin": "pgoutput", "rows": 3000000, "seconds": 180.2,
     "versions_with_txn": 1, "stream_buffer_size": 268435456,
     "peak_rss_mb": {"source_planner": 610.0, "python_worker_max": 240.1, ...}}

Linux only (``/proc``). Run: ``scripts/bench.sh pg_large_txn`` (or ``python bench/pg_large_txn.py
--rows 3000000``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from huge_transactions import measured_run

from harness.servers.postgres import PgCluster


def run_one(
    spark: Any, control: Any, dsn: str, plugin: str, rows: int, workdir: Path, buffer: str
) -> dict[str, Any]:
    import psycopg

    slot = f"large_{plugin}"
    table, checkpoint, spill = (
        workdir / f"table_{plugin}",
        workdir / f"ckpt_{plugin}",
        workdir / f"spill_{plugin}",
    )

    def query() -> Any:
        return (
            spark.readStream.format("txn-cdc")
            .option("connector", "postgres")
            .option("plugin", plugin)
            .option("dsn", dsn)
            .option("slot", slot)
            .option("tables", "public.big")
            .option("snapshot", "never")
            .option("snapshotDir", str(spill))
            .option("streamBufferSize", buffer)
            .load()
            .writeStream.format("delta-2pc")
            .option("path", str(table))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    first = query()
    if not control.await_termination(first, 600):
        raise SystemExit("the first run (slot creation) did not finish")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE big SET v = md5(v) || id::text")
    measured = measured_run(spark, control, query, str(table), rows, buffer)
    return {"bench": "pg_large_txn", "plugin": plugin, **measured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--plugins", default="pgoutput,wal2json")
    parser.add_argument("--buffer", default="256m", help="option streamBufferSize")
    args = parser.parse_args()

    import psycopg

    import spark_ckpt

    workdir = Path(tempfile.mkdtemp(prefix="pg-large-"))
    cluster = PgCluster(tempfile.mkdtemp(prefix="pg-large-server-")).start()
    try:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE big (id int PRIMARY KEY, v text)")
            conn.execute(
                "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, %s) g", (args.rows,)
            )
        spark = spark_ckpt.local_session("pg-large-txn")
        control = spark_ckpt.install(spark)
        for plugin in args.plugins.split(","):
            print(
                json.dumps(run_one(spark, control, dsn, plugin, args.rows, workdir, args.buffer)),
                flush=True,
            )
        spark.stop()
    finally:
        cluster.stop()
        shutil.rmtree(cluster.workdir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
