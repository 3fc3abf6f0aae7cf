"""The mysql connector's ``snapshot=incremental`` against a real MariaDB, under a live workload.

Two tables with rows (one keyed by ``id``, one by a composite key) are snapshotted in small
primary-key chunks, read on executors without a lock, while a workload commits transactions
that update, delete and re-key rows inside and outside the chunks being read. The change log
folded by key equals the tables, every transaction is whole in exactly one Delta version, and
the chunks are units of their own in the same order. A driver SIGKILLed while an executor reads
a chunk resumes after the chunks already emitted: every chunk is planned for reading once (the
killed batch is run again as logged), and the result is the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import wait_until

import spark_ckpt
from harness.faults import mysql_incremental as scenario
from harness.faults.debezium import delta_changes
from harness.servers.mariadb import MariaDbServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def _snapshot_done(checkpoint: Path) -> bool:
    """Whether the last logged batch ends past the snapshot (no chunk state in its offset)."""
    if not (checkpoint / "offsets").exists():
        return False
    logged = scenario.logged_offsets(checkpoint)
    return bool(logged) and "file" in logged[-1] and "snapshot" not in logged[-1]


def test_a_chunked_snapshot_under_a_live_workload_equals_the_tables(
    spark: SparkSession,
    control: spark_ckpt.Control,
    mariadb_server: MariaDbServer,
    mariadb_database: str,
    tmp_path: Path,
) -> None:
    server, database = mariadb_server, mariadb_database
    scenario.create_tables(server, database)
    checkpoint, table = tmp_path / "ckpt", tmp_path / "changes"
    workload = scenario.Workload(server, database, seed=3, limit=150, pause=0.05)
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "mysql")
        .option("host", server.host)
        .option("port", str(server.port))
        .option("user", server.user)
        .option("password", server.password)
        .option("serverId", "7311")
        .option("tables", ",".join(f"{database}.{name}" for name in scenario.KEYS))
        .option("snapshot", "incremental")
        .option("snapshotChunkRows", "50")
        .option("snapshotParallelism", "2")
        .option("snapshotDir", str(tmp_path / "spill"))
        .option("maxChangesPerTrigger", "400")
        .load()
        .writeStream.format("delta-2pc")
        .option("path", str(table))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:

        def planned() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            return (checkpoint / "offsets" / "0").exists()

        # The workload starts once the first chunks are planned (their reads run beside it),
        # after a column is added to accounts once a chunk was read: the log says so (the
        # stream's schema is the catalog's at the start, not the first row event's), the rows
        # read before it take its default, and a chunk read before it is never placed after
        # it (it is read again: whether its placement falls after the schema change depends on
        # the workload's first commit; the planner's unit tests make it happen).
        wait_until(planned, 300, "the query planned no chunk")

        def read() -> bool:
            return planned() and bool(list((tmp_path / "spill").glob("chunks/*.json")))

        wait_until(read, 300, "no chunk was read")
        server.execute(
            "ALTER TABLE accounts ADD COLUMN tier varchar(8) NOT NULL DEFAULT 'basic'", database
        )
        workload.start()
        overlap = []  # workload transactions committed at polls that saw chunks pending

        def done() -> bool:
            finished = planned() and _snapshot_done(checkpoint)
            if not finished and 0 < workload.transactions < workload.limit:
                overlap.append(workload.transactions)
            return finished

        wait_until(done, 300, "the incremental snapshot did not finish")
        workload.join(60)
        assert not workload.is_alive(), "the workload did not finish"
        assert workload.error is None, workload.error
        assert len(overlap) >= 3, f"the workload hardly ran beside the snapshot: {overlap}"
        # (The ALTER TABLE is no transaction of its own in the log: its schema change row
        # comes in the first transaction that writes accounts after it.)
        committed = workload.transactions

        def landed() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            ids = {r["txn_id"] for r in delta_changes(table) if r["op"] != "r"}
            return len(ids) >= committed

        wait_until(landed, 120, "the workload's transactions did not all land")
        # One more: the batch after the one that ended the snapshot commits that one, and with
        # it the snapshot's spill goes.
        server.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1", database)
        committed += 1
        wait_until(landed, 120, "the last transaction did not land")
        latest = query.lastProgress["sources"][0]["latestOffset"]
        status = (json.loads(latest) if isinstance(latest, str) else latest)["status"]
        assert status["connector"] == "mysql", status
    finally:
        workload.stop_event.set()
        query.stop()
    assert scenario.problems(table, server, database, committed) == []
    offsets = scenario.logged_offsets(checkpoint)
    chunks = {
        (c["table"].split(".")[1], c["index"])
        for o in offsets
        for c in (o.get("snapshot") or {}).get("pending", [])
    }
    # 300 accounts and 200 lines in chunks of 50, and the rows inserted meanwhile.
    for name, least in (("accounts", 6), ("order_lines", 4)):
        indexes = sorted(i for t, i in chunks if t == name)
        assert indexes == list(range(len(indexes))), sorted(chunks)
        assert len(indexes) >= least, sorted(chunks)
    assert not list((tmp_path / "spill").glob("chunks/*")), "the finished snapshot's spill stayed"


@pytest.mark.soak
def test_a_driver_killed_reading_a_chunk_resumes_at_the_last_chunk_emitted(
    mariadb_server: MariaDbServer, mariadb_database: str, tmp_path: Path
) -> None:
    """Killed while reading chunk 4 of ``accounts``: the restart plans no chunk again.

    Chunks 0 and 1 (read by batch 0) were emitted by batch 1; batch 2, reading chunks 4 and 5
    (and emitting 2 and 3), is killed, and run again as logged by the restart.
    """
    result = scenario.run_scenario(mariadb_server, mariadb_database, tmp_path)
    assert result["problems"] == [], result
    assert result["chunks_done_at_kill"] >= 2, result  # emitted before the kill, kept after it
    assert result["chunks_read_twice"] == [], result
    for name, least in (("accounts", 6), ("order_lines", 4)):  # 300 and 200 rows, 50 a chunk
        found = result["chunks"][name]
        assert found == list(range(len(found))), result
        assert len(found) >= least, result
    assert result["workload_transactions"] > 0, result
