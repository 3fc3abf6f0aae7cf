"""Benchmark: one huge transaction (a bulk UPDATE) through the mysql connector, memory watched.

Starts a throwaway MariaDB server (Debian's, as the tests use), fills a table with each of
``--rows`` row counts, starts a query (``snapshot=never``) that fixes its position, runs
``UPDATE big SET v = ...`` over every row in one transaction, and streams it with
``Trigger.availableNow`` into ``delta-2pc``. While it runs, every process of the run is sampled
from ``/proc`` for its peak resident memory (``VmHWM``, :class:`huge_transactions.MemoryWatch`): the
Python process that plans the source's batches holds the decoded binlog, so its peak is the
verdict. Checks that the transaction landed whole: one Delta version holds all its rows, with one
txn_id, txn_size = rows and every event index once.

Prints one JSON line per row count::

    {"bench": "mysql_large_txn", "rows": 1000000, "seconds": 140.2, "versions_with_txn": 1,
     "stream_buffer_size": "16m", "peak_rss_mb": {"source_planner": 310.0, ...}}

The planner's peak should not grow with the rows (the changes are in the change store,
compressed, spilled beyond ``streamBufferSize``). Linux only (``/proc``). Run:
``scripts/bench.sh mysql_large_txn --rows 100000,1000000``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from huge_transactions import measured_run

from harness.servers.mariadb import MariaDbServer

DATABASE = "bench"


def run_one(
    spark: Any, control: Any, server: MariaDbServer, rows: int, workdir: Path, buffer: str
) -> dict[str, Any]:
    server.execute("DROP TABLE IF EXISTS big", DATABASE)
    server.execute("CREATE TABLE big (id int PRIMARY KEY, v varchar(64))", DATABASE)
    server.execute(f"INSERT INTO big SELECT seq, md5(seq) FROM seq_1_to_{rows}", DATABASE)
    run_dir = workdir / f"rows_{rows}"
    table, checkpoint, spill = run_dir / "table", run_dir / "ckpt", run_dir / "spill"

    def query() -> Any:
        return (
            spark.readStream.format("txn-cdc")
            .option("connector", "mysql")
            .option("host", server.host)
            .option("port", str(server.port))
            .option("user", server.user)
            .option("password", server.password)
            .option("serverId", "7401")
            .option("tables", f"{DATABASE}.big")
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

    first = query()  # fixes the position: the UPDATE comes after it
    if not control.await_termination(first, 600):
        raise SystemExit("the first run (the position) did not finish")
    server.execute("UPDATE big SET v = concat(md5(v), id)", DATABASE)
    measured = measured_run(spark, control, query, str(table), rows, buffer)
    return {"bench": "mysql_large_txn", **measured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", default="100000,1000000", help="row counts, comma-separated")
    parser.add_argument("--buffer", default="16m", help="option streamBufferSize")
    args = parser.parse_args()

    import spark_ckpt

    workdir = Path(tempfile.mkdtemp(prefix="mysql-large-"))
    server = MariaDbServer(tempfile.mkdtemp(prefix="mysql-large-server-")).start()
    try:
        server.create_database(DATABASE)
        spark = spark_ckpt.local_session("mysql-large-txn")
        control = spark_ckpt.install(spark)
        for rows in (int(n) for n in args.rows.split(",")):
            result = run_one(spark, control, server, rows, workdir, args.buffer)
            print(json.dumps(result), flush=True)
        spark.stop()
    finally:
        server.stop()
        shutil.rmtree(server.workdir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
