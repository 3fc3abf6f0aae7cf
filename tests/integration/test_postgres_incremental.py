"""snapshot=incremental on the real server: chunks read alongside a live workload, then resumed."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from conftest import pgoutput_then_wal2json_in_soak, slow_wal_writer, wait_until
from test_postgres_cdc import plain_query

import spark_ckpt
from harness.faults.postgres_incremental import Workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from harness.servers.postgres import PgCluster

ROWS = 12_000


def incremental_query(
    spark: SparkSession, dsn: str, tmp_path: Path, plugin: str, trigger: dict[str, Any]
) -> Any:
    return plain_query(
        spark,
        dsn,
        tmp_path,
        "cdc_incremental",
        "public.inc",
        plugin,
        trigger,
        snapshot="incremental",
        snapshotChunkRows="1000",
        snapshotParallelism="2",
        maxChangesPerTrigger="500",
    )


def folded(spark: SparkSession, table: str) -> dict[int, dict[str, Any]]:
    """The change log applied in order: what a mirror of ``inc`` holds."""
    rows = spark.read.format("delta").load(table).orderBy("txn_order", "event_index").collect()
    state: dict[int, dict[str, Any]] = {}
    for row in rows:
        if row.op == "t":
            state.clear()
            continue
        if row.before is not None:
            state.pop(json.loads(row.before)["id"], None)
        if row.op == "d":
            state.pop(json.loads(row.key)["id"], None)
        else:
            after = json.loads(row.after)
            state[after["id"]] = after
    return state


def table_state(dsn: str) -> dict[int, dict[str, Any]]:
    """``inc`` as PostgreSQL holds it now, by id: what the folded change log must equal."""
    with psycopg.connect(dsn) as conn:
        return {
            r[0]: {"id": r[0], "v": r[1], "n": r[2]}
            for r in conn.execute("SELECT id, v, n FROM inc").fetchall()
        }


def phase(query: Any) -> str | None:
    """The connector's phase in the query's last progress (None before any)."""
    if not query.recentProgress:
        return None
    return str(json.loads(query.recentProgress[-1].sources[0].latestOffset)["status"]["phase"])


@pgoutput_then_wal2json_in_soak
def test_an_incremental_snapshot_with_a_live_workload_and_a_restart_is_exact(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
) -> None:
    """12 chunks read two at a time while transactions change, insert, delete and move rows.

    The query is stopped halfway and started again: it resumes at its chunks (none finished is
    read again). At the end the change log, applied in order, equals the table; every
    transaction of the stream is whole; no key is emitted twice by the snapshot.
    """
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE inc (id int PRIMARY KEY, v text, n int)")
        conn.execute(f"INSERT INTO inc SELECT g, md5(g::text), 0 FROM generate_series(1, {ROWS}) g")
    writer = Workload(pg_dsn, ROWS, seed=3, table="inc")
    writer.start()
    threading.Timer(25, writer.stop_event.set).start()
    table = str(tmp_path / "table")
    processing = {"processingTime": "300 milliseconds"}
    query = incremental_query(spark, pg_dsn, tmp_path, pg_plugin, processing)
    seen: list[dict[str, Any]] = []

    def chunks_done() -> int:
        for progress in query.recentProgress:
            latest = json.loads(progress.sources[0].latestOffset)
            if latest.get("status") and latest["status"].get("snapshot"):
                seen.append(latest["status"]["snapshot"])
        return max((s["chunksDone"] or 0 for s in seen), default=0)

    try:
        wait_until(lambda: chunks_done() >= 4, 180, "the snapshot did not emit 4 chunks")
    finally:
        query.stop()
    halfway = chunks_done()
    assert halfway < 12, "the snapshot finished before the restart: nothing to resume"
    query = incremental_query(spark, pg_dsn, tmp_path, pg_plugin, processing)
    try:
        writer.join(120)
        assert writer.error is None, writer.error
        assert writer.transactions > 50
        wait_until(
            lambda: not query.recentProgress or phase(query) == "stream",
            240,
            "the incremental snapshot did not finish",
        )
    finally:
        query.stop()
    bounded = incremental_query(spark, pg_dsn, tmp_path, pg_plugin, {"availableNow": True})
    assert control.await_termination(bounded, 240), "the catch-up run did not end"
    truth = table_state(pg_dsn)
    mirror = folded(spark, table)
    assert mirror == truth
    frame = spark.read.format("delta").load(table)
    snapshot_rows = frame.where("op = 'r'").select("key").collect()
    # Each key at most once (rows inserted while the last chunk was read are in it too).
    assert len(snapshot_rows) == len({r.key for r in snapshot_rows}), "a key emitted twice"
    # Stream transactions whole: as many rows as each says it has.
    sizes = frame.where("op <> 'r'").groupBy("txn_id", "txn_size").count().collect()
    assert all(r["count"] == r.txn_size for r in sizes)
    # The restart resumed: the second run's first progress had the chunks done before.
    assert halfway >= 4


def test_an_incremental_snapshot_is_exact_while_commits_wait_for_their_wal_flush(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_server: PgCluster,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """Asynchronous commits (``synchronous_commit=off``) are visible before they are flushed.

    A peek decodes the WAL only up to the flushed position, so a commit inserted but not yet
    flushed is in no peek yet. The connector places chunks only where a peek read everything
    (up to the flushed position read before it): were it the insert position, a batch would end
    past such commits, they would never be streamed, and a chunk read without them would be
    emitted whole. A slow WAL writer keeps that gap open for most of each second. The workload
    runs until every chunk is emitted, then a bounded run catches up right after its last
    commits (not flushed yet either).
    """
    rows = 4_000
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE inc (id int PRIMARY KEY, v text, n int)")
        conn.execute(f"INSERT INTO inc SELECT g, md5(g::text), 0 FROM generate_series(1, {rows}) g")
    table = str(tmp_path / "table")
    options = {"snapshot": "incremental", "snapshotChunkRows": "250", "snapshotParallelism": "2"}

    def start(trigger: dict[str, Any]) -> Any:
        slot, tables = "cdc_async_commit", "public.inc"
        return plain_query(spark, pg_dsn, tmp_path, slot, tables, "pgoutput", trigger, **options)

    with slow_wal_writer(pg_server, "1s"):
        writer = Workload(pg_dsn, rows, seed=5, table="inc", synchronous_commit=False)
        writer.start()
        query = start({"processingTime": "200 milliseconds"})
        try:
            wait_until(lambda: phase(query) == "stream", 240, "the snapshot did not finish")
            streamed_during = sum(p.numInputRows for p in query.recentProgress)
        finally:
            writer.stop_event.set()
            query.stop()
        writer.join(60)
        assert writer.error is None, writer.error
        assert writer.transactions > 50
        assert streamed_during > 0
        # A synchronous commit flushes the WAL before it: the bounded run is to see all of it.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE flushed ()")
        bounded = start({"availableNow": True})
        assert control.await_termination(bounded, 240), "the catch-up run did not end"
    truth = table_state(pg_dsn)
    mirror = folded(spark, table)
    differ = sorted(k for k in truth.keys() | mirror.keys() if truth.get(k) != mirror.get(k))
    assert not differ, f"{len(differ)} keys differ from the table, e.g. {differ[:10]}"
