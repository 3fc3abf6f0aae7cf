"""Slot health on the real server: lag and snapshot progress reported, heartbeats, invalidation."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from conftest import one_plugin, wait_until
from test_postgres_cdc import captured_once, plain_query, restart_failure, sql

import spark_ckpt
from spark_ckpt.cli import main as cli_main
from spark_ckpt.errors import ReplicationSlotError
from spark_ckpt.sources.options import SourceOptions
from spark_ckpt.sources.postgres.connector import PostgresConnector
from spark_ckpt.sources.postgres.options import PostgresOptions
from spark_ckpt.sources.postgres.snapshot import SnapshotManifest
from spark_ckpt.state.storage import Location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from harness.servers.postgres import PgCluster


def stream_query(
    spark: SparkSession, dsn: str, tmp_path: Path, slot: str, plugin: str, **options: str
) -> Any:
    """A plain postgres -> delta-2pc query on public.k with a short processing-time trigger."""
    trigger = {"processingTime": "200 milliseconds"}
    return plain_query(spark, dsn, tmp_path, slot, "public.k", plugin, trigger, **options)


class StatusLog:
    """Every ``status`` the connector reported, gathered from the query's recent progress.

    Spark keeps only the last 100 progress events, so each look keeps what it has not seen.
    """

    def __init__(self, query: Any) -> None:
        self.query = query
        self.seen: dict[str, dict[str, Any]] = {}

    def __call__(self) -> list[dict[str, Any]]:
        for progress in self.query.recentProgress:
            latest = progress.sources[0].latestOffset
            report = json.loads(latest) if isinstance(latest, str) else latest
            if report and report.get("status"):
                self.seen.setdefault(progress.timestamp, report["status"])
        return list(self.seen.values())


def confirmed_lsn(dsn: str, slot: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    assert row is not None, f"slot {slot} is gone"
    return str(row[0])


def lsn_at_least(dsn: str, lsn: str, target: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT %s::pg_lsn >= %s::pg_lsn", (lsn, target)).fetchone()
    return bool(row and row[0])


def current_lsn(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


@one_plugin
def test_progress_events_carry_the_slot_lag_and_the_snapshots_progress(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every progress event says how far the slot is behind; the snapshot's shows its rows.

    The history keeps the status with each completed checkpoint, and ``spark-ckpt status``
    prints the last one.
    """
    sql(
        pg_dsn,
        "CREATE TABLE k (id int PRIMARY KEY)",
        "INSERT INTO k SELECT generate_series(1, 700)",
        "ANALYZE k",
    )
    query = stream_query(spark, pg_dsn, tmp_path, "cdc_health", pg_plugin)
    statuses = StatusLog(query)
    try:
        wait_until(
            lambda: any(s["snapshot"] and s["snapshot"]["tablesDone"] == 1 for s in statuses()),
            120,
            "no progress event reported the finished snapshot",
        )
        sql(pg_dsn, "INSERT INTO k SELECT generate_series(701, 720)")
        table = tmp_path / "table"
        wait_until(
            lambda: spark.read.format("delta").load(str(table)).count() == 720,
            120,
            "the streamed rows did not arrive",
        )
        wait_until(
            lambda: any(s["phase"] == "stream" for s in statuses()),
            60,
            "no progress event of the stream phase",
        )
    finally:
        query.stop()
    reported = statuses()
    snapshot = next(
        s["snapshot"] for s in reported if s["snapshot"] and s["snapshot"]["tablesDone"]
    )
    assert snapshot["tables"] == 1
    assert snapshot["rowsRead"] == 700
    assert snapshot["rowsEstimated"] == 700  # ANALYZE told the server
    assert "700 of about 700 rows (100%)" in snapshot["summary"]
    streaming = [s for s in reported if s["phase"] == "stream"]
    for status in streaming:
        assert status["slot"] == "cdc_health"
        assert isinstance(status["lagBytes"], int)
        assert status["lagBytes"] >= 0
        assert isinstance(status["retainedBytes"], int)
        assert status["walStatus"] in ("reserved", "extended")
        assert isinstance(status["lagSeconds"], float)
        assert status["lagSeconds"] >= 0
    # The history kept it, and the CLI shows it.
    checkpoint = str(tmp_path / "ckpt")
    assert cli_main(["status", checkpoint, "--json"]) == 0
    state = json.loads(capsys.readouterr().out)
    assert state["sources"], "the history kept no source status"
    assert state["sources"][0]["slot"] == "cdc_health"
    assert isinstance(state["sources"][0]["lagBytes"], int)
    assert cli_main(["status", checkpoint]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("source"))
    assert "postgres slot cdc_health" in line
    assert "behind" in line
    assert "wal_status" in line


def test_a_heartbeat_confirms_the_slot_of_a_quiet_database_on_a_busy_server(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_server: PgCluster,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
) -> None:
    """Writes elsewhere on the server must not pin WAL behind a slot whose tables are quiet.

    Without the heartbeat nothing of this database is decoded, so the slot could never be
    confirmed past them: it would keep every byte the other database writes. Later changes of
    the captured table still arrive once, also after a restart.
    """
    sql(pg_dsn, "CREATE TABLE k (id int PRIMARY KEY)", "INSERT INTO k VALUES (1)")
    slot = "cdc_heartbeat"
    query = stream_query(spark, pg_dsn, tmp_path, slot, pg_plugin, heartbeatInterval="1s")
    table = tmp_path / "table"
    try:
        wait_until(lambda: (table / "_delta_log").exists(), 120, "no snapshot batch published")
        # Another database gets busy; this one stays quiet.
        with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE TEMP TABLE busy (v text)")
            for _ in range(20):
                conn.execute(
                    "INSERT INTO busy SELECT repeat('x', 1000) FROM generate_series(1, 50)"
                )
        written = current_lsn(pg_dsn)
        wait_until(
            lambda: lsn_at_least(pg_dsn, confirmed_lsn(pg_dsn, slot), written),
            60,
            f"slot {slot} was not confirmed past {written} while its database was quiet",
        )
    finally:
        query.stop()
    assert spark.read.format("delta").load(str(table)).count() == 1
    # The heartbeat batches are ordinary checkpoints: a restart resumes after them.
    sql(pg_dsn, "INSERT INTO k VALUES (2)")
    run = plain_query(spark, pg_dsn, tmp_path, slot, "public.k", pg_plugin)
    assert control.await_termination(run, 180), "the availableNow run did not finish"
    ids = sorted(
        json.loads(r.after)["id"] for r in spark.read.format("delta").load(str(table)).collect()
    )
    assert ids == [1, 2]


@one_plugin
def test_an_invalidated_slot_fails_the_restart_with_a_typed_error(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
) -> None:
    """max_slot_wal_keep_size removed the WAL a stopped query needed: say so, publish nothing."""
    from delta.tables import DeltaTable

    slot = "cdc_lost"
    captured_once(spark, control, pg_dsn, tmp_path, slot, pg_plugin)
    table = str(tmp_path / "table")
    version = DeltaTable.forPath(spark, table).history(1).collect()[0]["version"]
    sql(pg_dsn, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'", "SELECT pg_reload_conf()")
    try:

        def invalidated() -> bool:
            # Writes to the captured table, then new WAL segments and a checkpoint, which
            # removes the segments the slot still needs.
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                for _ in range(3):
                    conn.execute("INSERT INTO k SELECT coalesce(max(id), 0) + 1 FROM k")
                    conn.execute("SELECT pg_switch_wal()")
                conn.execute("CHECKPOINT")
                row = conn.execute(
                    "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,)
                ).fetchone()
            return row is not None and row[0] == "lost"

        wait_until(invalidated, 60, f"the server did not invalidate slot {slot}")
    finally:
        sql(pg_dsn, "ALTER SYSTEM RESET max_slot_wal_keep_size", "SELECT pg_reload_conf()")
    message = restart_failure(spark, pg_dsn, tmp_path, slot, "SlotInvalidatedError", pg_plugin)
    assert "wal_status=lost" in message
    assert "max_slot_wal_keep_size" in message
    assert "snapshot=initial" in message
    assert DeltaTable.forPath(spark, table).history(1).collect()[0]["version"] == version
    assert spark.read.format("delta").load(table).count() == 1


@one_plugin
def test_the_initial_offset_asked_while_the_snapshot_starts_is_the_snapshots(
    pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    """Asked again while its snapshot starts, the connector answers with the snapshot's offset.

    Spark asks at every trigger until it logs a first offset (the reader now keeps the first
    answer), and the snapshot runs in a thread over many triggers: it creates its slot before it
    writes the manifest that proves the slot its own. Asked in between, a suite run's query died
    with "slot already exists". The snapshot's thread is held there by its first manifest write;
    the connector runs as on the driver.
    """
    sql(pg_dsn, "CREATE TABLE k (id int PRIMARY KEY)", "INSERT INTO k VALUES (1), (2)")
    options = SourceOptions.parse(
        {"connector": "postgres", "dsn": pg_dsn, "slot": "own_start", "tables": "public.k"}
        | {"plugin": pg_plugin}
    ).connector_options
    assert isinstance(options, PostgresOptions)
    connector = PostgresConnector(options, 1000, Location(str(tmp_path / "spill")))
    created, release = threading.Event(), threading.Event()
    write_manifest = connector.spill.write_manifest

    def held_after_the_slot(manifest: SnapshotManifest) -> None:
        if not created.is_set():
            created.set()
            release.wait(60)
        write_manifest(manifest)

    connector.spill.write_manifest = held_after_the_slot  # type: ignore[method-assign]
    try:
        connector.check()
        first = connector.initial_offset()
        connector.snapshot.plan(bounded=False)  # starts the snapshot's thread
        assert created.wait(60), "the snapshot never created its slot"
        assert connector.slot.info() is not None, "the slot exists, its manifest does not yet"
        assert connector.spill.manifest() is None
        assert connector.initial_offset() == first
    finally:
        release.set()
    wait_until(
        lambda: (manifest := connector.spill.manifest()) is not None and manifest.complete,
        60,
        "the snapshot did not finish",
    )
    assert connector.initial_offset() == first
    connector.stop()
    # Another source's slot of that name is still refused.
    stranger = PostgresConnector(options, 1000, Location(str(tmp_path / "other-spill")))
    with pytest.raises(ReplicationSlotError, match="already exists"):
        stranger.initial_offset()
    stranger.stop()
