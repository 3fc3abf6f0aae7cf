"""The postgres connector against a real PostgreSQL server, into delta-2pc, supervised."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from conftest import one_plugin, wait_until, workers_stderr

import spark_ckpt
from harness.delta_reads import count_delta
from harness.workloads import postgres as pg_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter


def cdc_build(
    spark: SparkSession,
    dsn: str,
    table: Path,
    slot: str,
    tables: Sequence[str] = pg_workload.TABLES,
    **options: str,
) -> Callable[[], DataStreamWriter]:
    """build() for a supervised postgres -> delta-2pc query."""

    def build() -> DataStreamWriter:
        reader = (
            spark.readStream.format("txn-cdc")
            .option("connector", "postgres")
            .option("dsn", dsn)
            .option("slot", slot)
            .option("tables", ",".join(tables))
        )
        for key, value in {"maxChangesPerTrigger": "40", **options}.items():
            reader = reader.option(key, value)
        return (
            reader.load()
            .writeStream.format("delta-2pc")
            .option("path", str(table))
            .trigger(processingTime="200 milliseconds")
        )

    return build


def txlog_rows(table: Path) -> int:
    """The change rows of ``public.txlog`` published to the Delta table so far."""
    return count_delta(str(table), "\"table\" = 'public.txlog'")


# The quick tier runs it with one plugin (pgoutput, PostgreSQL's own); the full suite with both.
@pytest.mark.parametrize(
    "pg_plugin", ["wal2json", pytest.param("pgoutput", marks=pytest.mark.quick)], indirect=True
)
def test_snapshot_then_concurrent_stream_lands_exactly_once(
    spark: SparkSession, control: spark_ckpt.Control, pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    """Snapshot + a concurrent multi-table workload: every xid whole, once; tables reproduced."""
    pg_workload.create_schema(pg_dsn)
    # One workload runs while the query starts and snapshots, another while it streams.
    early = pg_workload.Workload(pg_dsn, transactions=60, seed=1).start()
    table = tmp_path / "table"
    supervised = control.supervise(
        cdc_build(
            spark,
            pg_dsn,
            table,
            "cdc_exact",
            snapshotDir=str(tmp_path / "spill"),
            plugin=pg_plugin,
        ),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="pg-exact",
    )
    try:
        wait_until(lambda: (table / "_delta_log").exists(), 180, "the snapshot was not published")
        late = pg_workload.Workload(pg_dsn, transactions=150, seed=2).start()
        early.join(240)
        late.join(240)
        committed = early.committed + late.committed
        expected = 1 + len(committed)  # the seed transaction and the workloads'
        wait_until(
            lambda: txlog_rows(table) >= expected,
            240,
            f"the Delta table did not catch up with {expected} transactions",
        )
    finally:
        supervised.stop(drain=True)
    verdict = pg_workload.verify(spark, str(table), pg_dsn, committed)
    assert verdict.ok, verdict
    assert verdict.transactions > 150, "too few transactions were streamed to prove anything"
    assert verdict.in_snapshot >= 1
    assert supervised.restarts == 0


def test_values_keep_full_precision(
    spark: SparkSession, control: spark_ckpt.Control, pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    """numeric, timestamptz, odd text and NULLs come through exactly, snapshot and stream alike."""
    import json

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE v (id int PRIMARY KEY, n numeric, ts timestamptz, t text, f float8, "
            "b boolean, j jsonb, a int[])"
        )
        row = (
            "12345678901234567890.123456789012345678",
            "2026-02-03 04:05:06.789012+00",
            'q"\\\n\u2028\U0001f600',
            0.1,
            True,
            '{"k": [1, 2.50]}',
            [1, 2],
        )
        conn.execute("INSERT INTO v VALUES (1, %s, %s, %s, %s, %s, %s, %s)", row)
        conn.execute("INSERT INTO v (id) VALUES (2)")
    table = tmp_path / "table"

    build = cdc_build(
        spark,
        pg_dsn,
        table,
        "cdc_values",
        ["public.v"],
        snapshotDir=str(tmp_path / "spill"),
        plugin=pg_plugin,
    )
    supervised = control.supervise(build, checkpoint_location=str(tmp_path / "ckpt"), name="vals")
    try:
        wait_until(lambda: (table / "_delta_log").exists(), 120, "no snapshot batch published")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO v VALUES (3, %s, %s, %s, %s, %s, %s, %s)", row)
            conn.execute("INSERT INTO v (id) VALUES (4)")

        def rows() -> list[dict[str, object]]:
            frame = spark.read.format("delta").load(str(table))
            return [
                json.loads(r.after) for r in frame.orderBy("txn_order", "event_index").collect()
            ]

        wait_until(lambda: len(rows()) == 4, 120, "the streamed rows did not arrive")
    finally:
        supervised.stop(drain=True)
    full, empty = rows()[0], rows()[1]
    expected = {
        "n": "12345678901234567890.123456789012345678",
        "ts": "2026-02-03 04:05:06.789012+00",
        "t": 'q"\\\n\u2028\U0001f600',
        "f": 0.1,
        "b": True,
        "j": '{"k": [1, 2.50]}',
        "a": "{1,2}",
    }
    assert {k: full[k] for k in expected} == expected
    assert rows()[2] == {**full, "id": 3}, "snapshot and stream render values alike"
    assert empty == {"id": 2, **{k: None for k in expected}}
    assert rows()[3] == {**empty, "id": 4}


@one_plugin
def test_table_without_primary_key_is_refused(
    spark: SparkSession, pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE nokey (a int, b text)")
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "postgres")
        .option("plugin", pg_plugin)
        .option("dsn", pg_dsn)
        .option("slot", "cdc_nokey")
        .option("tables", "public.nokey")
        .load()
        .writeStream.format("delta-2pc")
        .option("path", str(tmp_path / "t"))
        .option("checkpointLocation", str(tmp_path / "c"))
        .start()
    )
    with pytest.raises(Exception, match="TableCaptureError") as info:
        query.awaitTermination(120)
    assert "REPLICA IDENTITY FULL" in str(info.value)


@one_plugin
def test_a_dsn_that_does_not_connect_never_shows_the_password(
    spark: SparkSession,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    from harness.servers.postgres import PASSWORD

    bad = pg_dsn.replace(PASSWORD, PASSWORD + "-wrong")
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "postgres")
        .option("plugin", pg_plugin)
        .option("dsn", bad)
        .option("slot", "cdc_bad")
        .option("tables", "public.x")
        .load()
        .writeStream.format("delta-2pc")
        .option("path", str(tmp_path / "t"))
        .option("checkpointLocation", str(tmp_path / "c"))
        .start()
    )
    with pytest.raises(Exception, match="SourceConnectionError") as info:
        query.awaitTermination(120)
    message = str(info.value)
    assert "password authentication failed" in message
    assert "***" in message
    assert PASSWORD not in message
    time.sleep(0.5)  # let the worker's stderr reach the capture
    out, err = capfd.readouterr()
    # The JVM and its Python workers write to pytest's global capture, not to capfd's.
    workers = workers_stderr(request)
    assert workers is not None, "run with pytest's capture (not -s): the workers' log is checked"
    assert "password authentication failed" in workers, "the workers' log was not captured"
    assert PASSWORD not in out + err + workers


def plain_query(
    spark: SparkSession,
    dsn: str,
    tmp_path: Path,
    slot: str,
    tables: str,
    plugin: str,
    trigger: dict[str, Any] | None = None,
    **options: str,
) -> Any:
    """An unsupervised postgres -> delta-2pc query on tmp_path's checkpoint.

    ``trigger`` defaults to ``availableNow``; ``options`` are more source options.
    """
    reader = (
        spark.readStream.format("txn-cdc")
        .option("connector", "postgres")
        .option("plugin", plugin)
        .option("dsn", dsn)
        .option("slot", slot)
        .option("tables", tables)
        .option("snapshotDir", str(tmp_path / "spill"))
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .writeStream.format("delta-2pc")
        .option("path", str(tmp_path / "table"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )


def run_to_end(control: spark_ckpt.Control, query: Any) -> None:
    assert control.await_termination(query, 180), "the availableNow query did not finish"


def sql(dsn: str, *statements: str) -> None:
    """Run statements in autocommit mode."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def captured_once(
    spark: SparkSession,
    control: spark_ckpt.Control,
    dsn: str,
    tmp_path: Path,
    slot: str,
    plugin: str,
) -> None:
    """Table public.k with one row, captured by a first availableNow run to the end."""
    sql(dsn, "CREATE TABLE k (id int PRIMARY KEY)", "INSERT INTO k VALUES (1)")
    run_to_end(control, plain_query(spark, dsn, tmp_path, slot, "public.k", plugin))


def restart_failure(
    spark: SparkSession, dsn: str, tmp_path: Path, slot: str, error: str, plugin: str
) -> str:
    """Start the query on public.k again; it must fail with ``error``: return the message."""
    query = plain_query(spark, dsn, tmp_path, slot, "public.k", plugin)
    with pytest.raises(Exception, match=error) as info:
        query.awaitTermination(120)
    return str(info.value)


@one_plugin
def test_slot_moved_past_the_checkpoint_fails_the_restart_clearly(
    spark: SparkSession, control: spark_ckpt.Control, pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    """Someone confirmed the slot beyond the checkpoint: refuse instead of skipping changes."""
    captured_once(spark, control, pg_dsn, tmp_path, "cdc_moved", pg_plugin)
    sql(
        pg_dsn,
        "INSERT INTO k VALUES (2)",
        "SELECT pg_replication_slot_advance('cdc_moved', pg_current_wal_lsn())",
    )
    message = restart_failure(spark, pg_dsn, tmp_path, "cdc_moved", "RestoreError", pg_plugin)
    assert "replication slot 'cdc_moved' is confirmed up to" in message
    assert "the changes in between can no longer be read" in message


@one_plugin
def test_dropped_slot_fails_the_restart_clearly(
    spark: SparkSession, control: spark_ckpt.Control, pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    captured_once(spark, control, pg_dsn, tmp_path, "cdc_dropped", pg_plugin)
    sql(pg_dsn, "SELECT pg_drop_replication_slot('cdc_dropped')")
    message = restart_failure(spark, pg_dsn, tmp_path, "cdc_dropped", "RestoreError", pg_plugin)
    assert "does not exist" in message


@one_plugin
def test_snapshot_initial_refuses_a_slot_it_did_not_create(
    spark: SparkSession, pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    sql(
        pg_dsn,
        "CREATE TABLE k (id int PRIMARY KEY)",
        f"SELECT pg_create_logical_replication_slot('cdc_foreign', '{pg_plugin}')",
    )
    message = restart_failure(
        spark, pg_dsn, tmp_path, "cdc_foreign", "ReplicationSlotError", pg_plugin
    )
    assert "snapshot=never" in message


def test_truncate_is_carried_whole_with_its_transaction(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
) -> None:
    """TRUNCATE arrives as a change (op 't') in its transaction's place, never dropped."""
    captured_once(spark, control, pg_dsn, tmp_path, "cdc_truncate", pg_plugin)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("INSERT INTO k VALUES (2)")
            conn.execute("TRUNCATE k")
            conn.execute("INSERT INTO k VALUES (3)")
        conn.execute("INSERT INTO k VALUES (4)")
    run_to_end(control, plain_query(spark, pg_dsn, tmp_path, "cdc_truncate", "public.k", pg_plugin))
    frame = spark.read.format("delta").load(str(tmp_path / "table"))
    rows = frame.orderBy("txn_order", "event_index").collect()
    assert [(r.op, r.key) for r in rows] == [
        ("r", '{"id":1}'),
        ("c", '{"id":2}'),
        ("t", None),
        ("c", '{"id":3}'),
        ("c", '{"id":4}'),
    ]
    truncate = rows[2]
    assert (truncate.table, truncate.before, truncate.after) == ("public.k", None, None)
    assert len({r.txn_id for r in rows[1:4]}) == 1
    assert [(r.txn_size, r.event_index) for r in rows[1:4]] == [(3, 0), (3, 1), (3, 2)]


def test_nan_and_infinities_survive_with_pgoutput(
    spark: SparkSession, control: spark_ckpt.Control, pg_dsn: str, tmp_path: Path
) -> None:
    """Float and numeric NaN / +-Infinity stream as PostgreSQL spells them, as the snapshot does.

    (wal2json prints them as null, so this holds for pgoutput only; the postgres connector's
    page says so.)
    """
    import json

    sql(
        pg_dsn,
        "CREATE TABLE k (id int PRIMARY KEY, f float8, r real, n numeric)",
        "INSERT INTO k VALUES (1, 'NaN', 'Infinity', 'NaN')",
    )
    run_to_end(control, plain_query(spark, pg_dsn, tmp_path, "cdc_nan", "public.k", "pgoutput"))
    sql(
        pg_dsn,
        "INSERT INTO k VALUES (2, '-Infinity', 'NaN', 'Infinity'), (3, 1.5, -0.0, '-Infinity')",
    )
    run_to_end(control, plain_query(spark, pg_dsn, tmp_path, "cdc_nan", "public.k", "pgoutput"))
    rows = spark.read.format("delta").load(str(tmp_path / "table")).orderBy("txn_order").collect()
    assert [(r.op, json.loads(r.after)) for r in rows] == [
        ("r", {"id": 1, "f": "NaN", "r": "Infinity", "n": "NaN"}),
        ("c", {"id": 2, "f": "-Infinity", "r": "NaN", "n": "Infinity"}),
        ("c", {"id": 3, "f": 1.5, "r": -0.0, "n": "-Infinity"}),
    ]


def test_a_composite_key_reads_the_same_from_snapshot_and_stream(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
) -> None:
    """A primary key declared out of column order: ``key`` lists its columns in table order.

    wal2json prints them so; the snapshot and pgoutput follow, so one row's key has one text.
    """
    sql(
        pg_dsn,
        "CREATE TABLE k (id int, part text, PRIMARY KEY (part, id))",
        "INSERT INTO k VALUES (1, 'a')",
    )
    run_to_end(
        control, plain_query(spark, pg_dsn, tmp_path, "cdc_composite", "public.k", pg_plugin)
    )
    sql(pg_dsn, "INSERT INTO k VALUES (2, 'b')", "UPDATE k SET part = 'c' WHERE id = 1")
    run_to_end(
        control, plain_query(spark, pg_dsn, tmp_path, "cdc_composite", "public.k", pg_plugin)
    )
    frame = spark.read.format("delta").load(str(tmp_path / "table"))
    rows = frame.orderBy("txn_order", "event_index").collect()
    assert [(r.op, r.key, r.before) for r in rows] == [
        ("r", '{"id":1,"part":"a"}', None),
        ("c", '{"id":2,"part":"b"}', None),
        ("u", '{"id":1,"part":"c"}', '{"id":1,"part":"a"}'),
    ]


def test_changes_of_tables_not_captured_are_left_out_of_whole_transactions(
    spark: SparkSession, control: spark_ckpt.Control, pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    """A transaction touching a captured and an uncaptured table delivers the captured part whole.

    Its txn_size and event_index count the captured changes only, so the unit stays complete.
    """
    captured_once(spark, control, pg_dsn, tmp_path, "cdc_partial", pg_plugin)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE other (id int PRIMARY KEY)")
        with conn.transaction():
            conn.execute("INSERT INTO k VALUES (2)")
            conn.execute("INSERT INTO other VALUES (1)")
            conn.execute("INSERT INTO k VALUES (3)")
    run_to_end(control, plain_query(spark, pg_dsn, tmp_path, "cdc_partial", "public.k", pg_plugin))
    rows = (
        spark.read.format("delta")
        .load(str(tmp_path / "table"))
        .where("op = 'c'")
        .orderBy("event_index")
        .collect()
    )
    assert [r.key for r in rows] == ['{"id":2}', '{"id":3}']
    assert {r.table for r in rows} == {"public.k"}
    assert len({r.txn_id for r in rows}) == 1
    assert [(r.txn_size, r.event_index) for r in rows] == [(2, 0), (2, 1)]


def test_added_column_is_carried_through(
    spark: SparkSession, control: spark_ckpt.Control, pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    """Rows after ALTER TABLE carry the new column, each change of schema a row of its own.

    The column is added and dropped again before the query reads the slot: pgoutput's relation
    messages show both changes; for wal2json the catalog's definition version (dropped columns
    included) differs although its live columns are the same again, so the table's changes are
    watched and both found.
    """
    import json

    captured_once(spark, control, pg_dsn, tmp_path, "cdc_alter", pg_plugin)
    sql(
        pg_dsn,
        "INSERT INTO k VALUES (2)",
        "ALTER TABLE k ADD COLUMN note text",
        "INSERT INTO k VALUES (3, 'new')",
        "ALTER TABLE k DROP COLUMN note",
        "INSERT INTO k VALUES (4)",
    )
    run_to_end(control, plain_query(spark, pg_dsn, tmp_path, "cdc_alter", "public.k", pg_plugin))
    rows = (
        spark.read.format("delta")
        .load(str(tmp_path / "table"))
        .orderBy("txn_order", "event_index")
        .collect()
    )
    assert [r.op for r in rows] == ["r", "c", "s", "c", "s", "c"]
    data = [json.loads(r.after) for r in rows if r.op != "s"]
    assert data == [{"id": 1}, {"id": 2}, {"id": 3, "note": "new"}, {"id": 4}]
    changes = [json.loads(r.after)["changes"] for r in rows if r.op == "s"]
    assert changes == [
        [{"change": "column_added", "column": "note", "to": "string"}],
        [{"change": "column_dropped", "column": "note", "from": "string"}],
    ]


@one_plugin
def test_empty_tables_snapshot_to_nothing_and_stream_from_the_slot_start(
    spark: SparkSession, control: spark_ckpt.Control, pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    """snapshot=initial on empty tables: no snapshot batch; later changes stream as usual."""
    import json

    from spark_ckpt.sources.postgres.snapshot import SnapshotSpill
    from spark_ckpt.state.storage import Location

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE k (id int PRIMARY KEY)")
    table = tmp_path / "table"

    build = cdc_build(
        spark,
        pg_dsn,
        table,
        "cdc_empty",
        ["public.k"],
        snapshotDir=str(tmp_path / "spill"),
        plugin=pg_plugin,
    )
    spill = SnapshotSpill(Location(str(tmp_path / "spill")))
    supervised = control.supervise(build, checkpoint_location=str(tmp_path / "ckpt"), name="empty")
    try:
        wait_until(
            lambda: (m := spill.manifest()) is not None and m.complete, 120, "no empty snapshot"
        )
        assert spill.manifest().rows == 0  # type: ignore[union-attr]
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO k VALUES (1), (2)")
            conn.execute("INSERT INTO k VALUES (3)")

        def rows() -> list[Any]:
            if not (table / "_delta_log").exists():
                return []
            frame = spark.read.format("delta").load(str(table))
            return frame.orderBy("txn_order", "event_index").collect()

        wait_until(lambda: len(rows()) == 3, 120, "the streamed rows did not arrive")
    finally:
        supervised.stop(drain=True)
    assert [json.loads(r.after)["id"] for r in rows()] == [1, 2, 3]
    assert [r.op for r in rows()] == ["c", "c", "c"]
    assert [r.txn_order for r in rows()] == [0, 0, 1]


@one_plugin
def test_a_restart_before_any_batch_takes_the_snapshot_again(
    spark: SparkSession, control: spark_ckpt.Control, pg_dsn: str, pg_plugin: str, tmp_path: Path
) -> None:
    """Stopped in the snapshot phase (empty tables): the restart's snapshot sees the new rows."""
    import json

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE k (id int PRIMARY KEY)")
    run_to_end(control, plain_query(spark, pg_dsn, tmp_path, "cdc_again", "public.k", pg_plugin))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO k VALUES (1), (2)")
    run_to_end(control, plain_query(spark, pg_dsn, tmp_path, "cdc_again", "public.k", pg_plugin))
    rows = spark.read.format("delta").load(str(tmp_path / "table")).orderBy("event_index").collect()
    assert [(r.op, json.loads(r.after)["id"]) for r in rows] == [("r", 1), ("r", 2)]


def test_the_servers_rows_decode_natively_like_the_python_reference(pg_dsn: str) -> None:
    """Every value type this server prints for a varied table decodes as the reference does.

    Guards the native decoder against the plugin's output changing under it: a wal2json upgrade
    that fails this needs ``sources/postgres/native/src/wal2json.rs`` adjusted.
    """
    import pyarrow as pa

    from harness.references.wal2json import render_change
    from spark_ckpt.sources.postgres.decoding.wal2json import decode_transactions
    from spark_ckpt.sources.postgres.decoding.wal2json_columns import decode_changes
    from spark_ckpt.sources.postgres.slot import Slot

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE w (id int, part text, n numeric(20,4), f8 float8, f4 real, b boolean, "
            "t text, j jsonb, a int[], ts timestamptz, d date, by bytea, s smallint, big bigint, "
            "m money, u uuid, PRIMARY KEY (part, id))"
        )
    slot = Slot(pg_dsn, "fast_path")
    slot.create()
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO w VALUES (1, 'p\"1', -12.5, 3, 0.25, true, E'a\\\\b\"c\\n\\t\\x01é', "
                "'{\"k\": [1, 2.50]}', '{1,2}', now(), '2026-01-02', '\\x00ff', -3, "
                "9223372036854775807, 1.5, gen_random_uuid()), (2, 'q', null, -0.0, 1e-7, false, "
                "null, null, null, null, null, null, null, null, null, null)"
            )
            conn.execute("UPDATE w SET f8 = 2.5, id = 3 WHERE id = 2")
            conn.execute("DELETE FROM w WHERE id = 1")
        rows = slot.peek(None, None, ["public.w"])
    finally:
        slot.drop()
        slot.close()
    texts = [c for txn in decode_transactions(rows) for c in txn.changes]
    assert len(texts) == 4
    out = decode_changes(pa.array(texts, pa.string()))
    expected = [render_change(text) for text in texts]
    columns = [c.to_pylist() for c in (out.table, out.op, out.key, out.before, out.after)]
    assert list(zip(*columns, strict=True)) == expected
    # wal2json lists the key columns in table column order, whatever the PRIMARY KEY order.
    assert expected[0][2] == '{"id":1,"part":"p\\"1"}'
