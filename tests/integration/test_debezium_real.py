"""The debezium-json connector on a log Debezium itself writes (PostgreSQL, pgoutput).

Debezium's embedded engine (``tests/harness/peers/debezium-writer``) captures the test PostgreSQL
server and publishes record values as JSONL files, the way an object-store sink does. The workload's
transactions each log their own xid in ``txlog`` (``harness.workloads.postgres``), so every
committed transaction can be found in the Delta table under Debezium's transaction id.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from changelog_checks import whole_once
from conftest import wait_until
from debezium_postgres import (
    CHUNK_ROWS,
    SIGNAL_TABLE,
    WITH_SIGNALS,
    assert_folds_to_tables,
    canonical,
    create_signal_table,
    large_transaction,
    mirror_tables,
    query,
    request_incremental_snapshot,
    writer_for,
)

import spark_ckpt
from harness.faults.debezium import delta_changes, delta_txn_ids
from harness.servers.postgres import PgCluster
from harness.workloads import postgres as pg_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_a_log_debezium_wrote_lands_whole_once_and_folds_to_the_tables(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_server: PgCluster,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """Snapshot + workload + a large transaction + a writer SIGKILL + an incremental snapshot.

    Each xid lands in one Delta version, and so does each chunk of the incremental snapshot,
    at its place in the history of the keys it holds.
    """
    pg_workload.create_schema(pg_dsn, accounts=40)
    create_signal_table(pg_dsn)
    writer = writer_for(pg_server, pg_dsn, tmp_path, signals=True).start()
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
        # Chunks read while the workload changes the same rows.
        request_incremental_snapshot(pg_dsn, ["public.accounts", "public.orders"])
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
    # Each chunk of the incremental snapshot is one unit (no transaction: named by its first
    # record's place in the log), whole in one version (whole_once).
    chunks = {t: v for t, v in by_txn.items() if not t.isdigit()}
    assert {r["op"] for v in chunks.values() for r in v} == {"r"}
    assert {r["table"] for v in chunks.values() for r in v} == {"public.accounts", "public.orders"}
    assert 1 < max(len(v) for v in chunks.values()) <= CHUNK_ROWS, sorted(map(len, chunks.values()))
    # Debezium's own transactions: the signal and the watermarks it writes to the signal table.
    signals = {t for t, v in by_txn.items() if {r["table"] for r in v} == {SIGNAL_TABLE}}
    streamed = {int(t) for t in by_txn.keys() - chunks.keys() - signals}
    assert sorted(streamed) == sorted(committed), "a committed transaction is missing or extra"
    assert max(len(v) for v in by_txn.values()) >= 3000, "the large transaction was not whole"

    # The change log folded by key equals each table, row for row: the chunks' rows are read
    # state, right only at their place in each key's history.
    assert_folds_to_tables(rows, pg_dsn, WITH_SIGNALS)

    # Mirror mode's tables equal the source tables, row for row.
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    mirrors = mirror_tables(
        spark, control, tmp_path / "log", tmp_path / "mirror", tmp_path / "m", WITH_SIGNALS
    )
    with psycopg.connect(pg_dsn) as conn:
        for name in WITH_SIGNALS:
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
