"""Debezium capturing the test PostgreSQL server: what the Debezium integration tests share.

The workload is ``harness.workloads.postgres``'s; Debezium writes decimals as strings
(``decimal.handling.mode=string``) and ``timestamptz`` as ISO text (``ZonedTimestamp``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from changelog_checks import Row, by_key, fold

import spark_ckpt
from harness.faults.debezium import mirror_log
from harness.servers.postgres import PASSWORD, USER, PgCluster
from harness.workloads import postgres as pg_workload
from harness.workloads.debezium import DebeziumWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

KEYS = {
    "public.accounts": ("id",),
    "public.orders": ("id",),
    "public.order_items": ("order_id", "line"),
    "public.txlog": ("xid",),
}


SIGNAL_TABLE = "public.debezium_signal"
"""Debezium's signal table (``signal.data.collection``), captured like the others."""

WITH_SIGNALS = {**KEYS, SIGNAL_TABLE: ("id",)}
"""The tables and keys of a capture that takes signals."""

CHUNK_ROWS = 16
"""Rows per chunk of an incremental snapshot (``incremental.snapshot.chunk.size``)."""


def create_signal_table(dsn: str) -> None:
    """The signal table in the structure Debezium's documentation requires (id, type, data)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE debezium_signal "
            "(id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))"
        )


def request_incremental_snapshot(dsn: str, tables: Sequence[str]) -> None:
    """Send Debezium an ``execute-snapshot`` signal for ``tables`` (an incremental snapshot)."""
    data = json.dumps({"data-collections": list(tables), "type": "incremental"})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO debezium_signal VALUES (%s, 'execute-snapshot', %s)",
            (f"snapshot-{uuid.uuid4().hex[:8]}", data),
        )


def writer_for(
    server: PgCluster, dsn: str, tmp_path: Path, *, signals: bool = False
) -> DebeziumWriter:
    """Debezium on the test database; decimals as exact strings, timestamps as ISO text.

    ``signals``: Debezium takes signals from :data:`SIGNAL_TABLE` (created by
    :func:`create_signal_table`), which it captures too, and snapshots incrementally in chunks
    of :data:`CHUNK_ROWS` rows.
    """
    database = dsn.rsplit("/", 1)[1]
    tag = uuid.uuid4().hex[:8]
    tables = list(pg_workload.TABLES)
    props = {"decimal.handling.mode": "string"}
    if signals:
        tables.append(SIGNAL_TABLE)
        props["signal.data.collection"] = SIGNAL_TABLE
        props["incremental.snapshot.chunk.size"] = str(CHUNK_ROWS)
    return DebeziumWriter(
        "postgres",
        tmp_path / "log",
        tmp_path / "writer",
        host="127.0.0.1",
        port=server.port,
        user=USER,
        password=PASSWORD,
        database=database,
        tables=",".join(tables),
        slot=f"dbz_{tag}",
        publication=f"dbz_{tag}",
        roll_records=200,
        props=props,
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


def assert_folds_to_tables(
    rows: Sequence[Row], dsn: str, keys: Mapping[str, Sequence[str]] = KEYS
) -> None:
    """The change log folded by key equals each table of ``keys`` (``SELECT *``), row for row."""
    state = fold(rows, keys, debezium_value)
    with psycopg.connect(dsn) as conn:
        for name, key_columns in keys.items():
            cursor = conn.execute(f"SELECT * FROM {name}")
            columns = [d.name for d in cursor.description or ()]
            actual = by_key(columns, cursor.fetchall(), key_columns, lambda _, v: exact(v))
            assert state[name] == actual, f"{name} differs from its folded change log"


@dataclass
class PostgresCapture:
    """One test database, its workloads and checks, as ``test_debezium_driver_kill`` runs them."""

    server: PgCluster
    dsn: str
    accounts: int = 30
    accounts_table = "public.accounts"
    """The accounts table's name in the change log."""

    def create_schema(self) -> None:
        pg_workload.create_schema(self.dsn, accounts=self.accounts)

    def writer(self, tmp_path: Path) -> DebeziumWriter:
        return writer_for(self.server, self.dsn, tmp_path)

    def start_workload(
        self, name: str, transactions: int, seed: int
    ) -> Callable[[float], list[str]]:
        """Start a workload (0.05 s between transactions); returns a join giving its xids."""
        workload = pg_workload.Workload(
            self.dsn, transactions=transactions, seed=seed, accounts=self.accounts, pause=0.05
        ).start()

        def join(timeout: float) -> list[str]:
            workload.join(timeout)
            return [str(xid) for xid in workload.committed]

        return join

    def large_transaction(self, rows: int) -> str:
        return str(large_transaction(self.dsn, rows))

    def assert_folds_to_tables(self, rows: Sequence[Row]) -> None:
        assert_folds_to_tables(rows, self.dsn)


def mirror_tables(
    spark: SparkSession,
    control: spark_ckpt.Control,
    log: Path,
    root: Path,
    ckpt: Path,
    keys: Mapping[str, Sequence[str]] = KEYS,
) -> dict[str, Any]:
    """Mirror the log (``harness.faults.debezium.mirror_log``), read with ``read_consistent``."""
    mirror_log(spark, control, log, root, ckpt, keys)
    return spark_ckpt.read_consistent(spark, str(root))
