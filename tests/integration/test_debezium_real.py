"""The debezium-json connector on a log Debezium itself writes (PostgreSQL, pgoutput).

Debezium's embedded engine (``bench/peers/debezium-writer``) captures the test PostgreSQL
server and publishes record values as JSONL files, the way an object-store sink does. The
workload's transactions each log their own xid in ``txlog`` (``bench/pg_workload.py``), so every
committed transaction can be found in the Delta table under Debezium's transaction id.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pg_workload
import psycopg
from changelog_checks import whole_once
from conftest import wait_until
from debezium_harness import delta_changes, delta_txn_ids
from debezium_postgres import (
    KEYS,
    assert_folds_to_tables,
    canonical,
    large_transaction,
    mirror_tables,
    query,
    writer_for,
)
from pg_cluster import PgCluster

import spark_ckpt

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_a_log_debezium_wrote_lands_whole_once_and_folds_to_the_tables(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_server: PgCluster,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """Snapshot + workload + a large transaction + a writer SIGKILL: each xid in one version."""
    pg_workload.create_schema(pg_dsn, accounts=40)
    writer = writer_for(pg_server, pg_dsn, tmp_path).start()
    table = tmp_path / "table"
    supervised = control.supervise(
        lambda: query(spark, tmp_path / "log", table),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="dbz-real",
    )
    committed: list[int] = []
    try:
        first = pg_workload.Workload(pg_dsn, transactions=80, seed=1, accounts=40).start()
        first.join(240)
        committed += first.committed
        # Killed right after a file is published while transactions run: its offsets lag, so it
        # writes again (once its offsets are past the snapshot, else it would take the snapshot
        # again). The first workload is over by now, so the record waited for is this one's.
        writer.wait_offsets_past_snapshot(120)
        published = writer.published_records()
        while_down = pg_workload.Workload(pg_dsn, transactions=20, seed=2, accounts=40).start()
        writer.wait_for_records(published + 1, 60)
        writer.kill()
        while_down.join(120)
        committed += while_down.committed
        writer.restart()
        committed.append(large_transaction(pg_dsn, 3000))
        second = pg_workload.Workload(pg_dsn, transactions=60, seed=3, accounts=40).start()
        second.join(240)
        committed += second.committed
        writer.wait_idle(2.0, 180)
        expected = {str(xid) for xid in committed} | {"snapshot"}
        wait_until(
            lambda: (table / "_delta_log").exists() and delta_txn_ids(table) >= expected,
            240,
            f"the Delta table did not catch up with {len(committed)} transactions",
        )
    finally:
        supervised.stop(drain=True)
        writer.close()

    # Every transaction in exactly one Delta version, whole, once.
    rows = delta_changes(table)
    by_txn = whole_once(rows)
    # The snapshot is one unit: all 40 accounts (and nothing streamed) in it.
    snapshot = by_txn.pop("snapshot")
    assert {r["op"] for r in snapshot} == {"r"}
    assert sum(1 for r in snapshot if r["table"] == "public.accounts") == 40
    streamed = {int(t) for t in by_txn}
    assert sorted(streamed) == sorted(committed), "a committed transaction is missing or extra"
    assert max(len(v) for v in by_txn.values()) >= 3000, "the large transaction was not whole"

    # The change log folded by key equals each table, row for row.
    assert_folds_to_tables(rows, pg_dsn)

    # Mirror mode's tables equal the source tables, row for row.
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    mirrors = mirror_tables(spark, control, tmp_path / "log", tmp_path / "mirror", tmp_path / "m")
    with psycopg.connect(pg_dsn) as conn:
        for name in KEYS:
            cursor = conn.execute(f"SELECT * FROM {name}")
            columns = [d.name for d in cursor.description or ()]
            source = sorted(
                (tuple((c, canonical(c, v)) for c, v in zip(columns, row, strict=True)))
                for row in cursor.fetchall()
            )
            mirrored = sorted(
                tuple((c, canonical(c, row[c])) for c in columns)
                for row in (r.asDict() for r in mirrors[name].collect())
            )
            assert mirrored == source, f"the mirror of {name} differs from the table"
