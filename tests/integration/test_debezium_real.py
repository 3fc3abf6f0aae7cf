"""The debezium-json connector on a log Debezium itself writes (PostgreSQL, pgoutput).

Debezium's embedded engine (``bench/peers/debezium-writer``) captures the test PostgreSQL
server and publishes record values as JSONL files, the way an object-store sink does. The
workload's transactions each log their own xid in ``txlog`` (``bench/pg_workload.py``), so every
committed transaction can be found in the Delta table under Debezium's transaction id.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pg_workload
import psycopg
from conftest import wait_until
from debezium_writer import DebeziumWriter
from pg_cluster import PASSWORD, USER, PgCluster

import spark_ckpt

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

KEYS = {
    "public.accounts": ("id",),
    "public.orders": ("id",),
    "public.order_items": ("order_id", "line"),
    "public.txlog": ("xid",),
}


def writer_for(server: PgCluster, dsn: str, tmp_path: Path) -> DebeziumWriter:
    """Debezium on the test database; decimals as exact strings, timestamps as ISO text."""
    database = dsn.rsplit("/", 1)[1]
    tag = uuid.uuid4().hex[:8]
    return DebeziumWriter(
        "postgres",
        tmp_path / "log",
        tmp_path / "writer",
        host="127.0.0.1",
        port=server.port,
        user=USER,
        password=PASSWORD,
        database=database,
        tables=",".join(pg_workload.TABLES),
        slot=f"dbz_{tag}",
        publication=f"dbz_{tag}",
        roll_records=200,
        props={"decimal.handling.mode": "string"},
    )


def query(spark: SparkSession, log: Path, table: Path) -> DataStreamWriter:
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", "300")
        .load(str(log))
        .writeStream.format("delta-2pc")
        .option("path", str(table))
        .trigger(processingTime="200 milliseconds")
    )


def large_transaction(dsn: str, rows: int) -> int:
    """One transaction of ``rows`` item inserts and a primary-key change; returns its xid."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        row = conn.execute(
            "INSERT INTO txlog VALUES (pg_current_xact_id()::text::bigint, 'large') RETURNING xid"
        ).fetchone()
        assert row is not None
        conn.execute(
            "INSERT INTO orders (id, account_id, amount, note, ratio) "
            "VALUES (900000000, 1, 12.5000, 'large', 0.25)"
        )
        conn.execute(
            "INSERT INTO order_items SELECT 900000000, n, 'sku-' || n, 1 "
            "FROM generate_series(0, %s) AS n",
            (rows - 2,),
        )
        # A key change: Debezium writes it as a delete and a create.
        conn.execute("UPDATE accounts SET id = 7000000 WHERE id = 3")
        return int(row[0])


def delta_versions(table: str) -> dict[str, int]:
    """The Delta version that added each data file (the sink only ever adds files)."""
    from deltalake import DeltaTable

    seen: set[str] = set()
    version_of: dict[str, int] = {}
    for version in range(DeltaTable(table).version() + 1):
        files = set(DeltaTable(table, version=version).file_uris())
        for uri in files - seen:
            version_of[uri.rsplit("/", 1)[-1]] = version
        seen |= files
    return version_of


NUMERIC = ("balance", "amount")
ZONED = ("updated", "created")


def exact(value: Any) -> Any:
    """A value compared exactly: decimals by digits and scale, timestamps as instants."""
    if isinstance(value, Decimal):
        return value.as_tuple()
    return value


def debezium_value(column: str, value: Any) -> Any:
    """A value as Debezium wrote it here, read back.

    ``decimal.handling.mode=string`` keeps the digits and the scale; ``timestamptz`` is
    ``io.debezium.time.ZonedTimestamp``, ISO-8601 in UTC.
    """
    if value is None:
        return None
    if column in NUMERIC:
        return exact(Decimal(value))
    if column in ZONED:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


def canonical(column: str, value: Any) -> Any:
    """One spelling for a value read from PostgreSQL (psycopg) or a mirror (Spark, UTC)."""
    if value is None:
        return None
    if column in NUMERIC:
        return exact(Decimal(value) if isinstance(value, str) else value)
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return value


def mirror_tables(
    spark: SparkSession, control: spark_ckpt.Control, log: Path, root: Path, ckpt: Path
) -> dict[str, Any]:
    """Mirror the whole log (availableNow), keys from keyColumns, types from the envelopes."""
    keys = ";".join(f"{table}:{','.join(columns)}" for table, columns in KEYS.items())
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("columnTypes", "true")
        .option("keyColumns", keys)
        .option("maxChangesPerTrigger", "2000")
        .load(str(log))
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", str(root))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    assert control.await_termination(query, 240), "the mirror query did not finish"
    return spark_ckpt.read_consistent(spark, str(root))


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
        # Killed right after a file is published: its offsets lag, so it writes again.
        writer.wait_for_records(writer.published_records() + 1, 60)
        writer.kill()
        while_down = pg_workload.Workload(pg_dsn, transactions=20, seed=2, accounts=40).start()
        while_down.join(120)
        committed += while_down.committed
        writer.restart()
        committed.append(large_transaction(pg_dsn, 3000))
        second = pg_workload.Workload(pg_dsn, transactions=60, seed=3, accounts=40).start()
        second.join(240)
        committed += second.committed
        writer.wait_idle(2.0, 180)
        wait_until(
            lambda: (
                (table / "_delta_log").exists()
                and spark.read.format("delta")
                .load(str(table))
                .where("`table` = 'public.txlog'")
                .count()
                >= len(committed)
            ),
            240,
            f"the Delta table did not catch up with {len(committed)} transactions",
        )
    finally:
        supervised.stop(drain=True)
        writer.close()

    version_of = delta_versions(str(table))
    from pyspark.sql.functions import input_file_name

    rows = (
        spark.read.format("delta").load(str(table)).withColumn("file", input_file_name()).collect()
    )
    by_txn: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        by_txn[row.txn_id].append(row)
    # Every transaction in exactly one Delta version, whole, once.
    for txn_id, txn_rows in by_txn.items():
        versions = {version_of[r.file.rsplit("/", 1)[-1]] for r in txn_rows}
        assert len(versions) == 1, f"transaction {txn_id} is split over versions {versions}"
        indexes = sorted(r.event_index for r in txn_rows)
        assert indexes == list(range(txn_rows[0].txn_size)), f"{txn_id}: events {indexes}"
    # The snapshot is one unit: all 40 accounts (and nothing streamed) in it.
    snapshot = by_txn.pop("snapshot")
    assert {r.op for r in snapshot} == {"r"}
    assert sum(1 for r in snapshot if r.table == "public.accounts") == 40
    streamed = {int(t) for t in by_txn}
    assert sorted(streamed) == sorted(committed), "a committed transaction is missing or extra"
    assert max(len(v) for v in by_txn.values()) >= 3000, "the large transaction was not whole"

    # The change log folded by key equals each table, row for row.
    state: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = defaultdict(dict)
    for row in sorted(rows, key=lambda r: (r.txn_order, r.event_index)):
        image = json.loads(row.before if row.op == "d" else row.after)
        key = tuple(image[k] for k in KEYS[row.table])
        if row.op == "d":
            state[row.table].pop(key, None)
        else:
            state[row.table][key] = {k: debezium_value(k, v) for k, v in image.items()}
    with psycopg.connect(pg_dsn) as conn:
        for name, key_columns in KEYS.items():
            cursor = conn.execute(f"SELECT * FROM {name}")
            columns = [d.name for d in cursor.description or ()]
            actual = {}
            for values in cursor.fetchall():
                record = {c: exact(v) for c, v in zip(columns, values, strict=True)}
                actual[tuple(record[k] for k in key_columns)] = record
            assert state[name] == actual, f"{name} differs from its folded change log"

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
