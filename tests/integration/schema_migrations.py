"""The migration sequences the schema change tests run, per database, and their tables.

PostgreSQL's is run by the ``postgres`` connector's test and, as far as Debezium's records can
show it, through Debezium by the ``debezium-json`` and ``kafka`` ones
(:func:`follow_debezium_postgres`); MariaDB's by the ``debezium-json`` and ``mysql`` ones. Each
step is a list of statements followed by ordinary writes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
from conftest import wait_until
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql.types import StructType

import spark_ckpt
from harness.faults.postgres_schema import mirror_table, source_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from harness.servers.mariadb import MariaDbServer

PRODUCTS, TAGS = "public.products", "public.tags"

POSTGRES_STEPS: list[tuple[str, list[str]]] = [
    (
        "add a nullable column",
        ["ALTER TABLE products ADD COLUMN note text", "UPDATE products SET note = 'n' || id"],
    ),
    (
        "add a column with a default existing rows read",
        [
            "ALTER TABLE products ADD COLUMN flag boolean NOT NULL DEFAULT true",
            "INSERT INTO products (id, name, price, qty, sku, amount, flag) "
            "VALUES (100, 'late', 1.00, 1, 's100', 2.50, false)",
        ],
    ),
    (
        "rename a column",
        [
            "ALTER TABLE products RENAME COLUMN name TO title",
            "UPDATE products SET qty = qty + 1 WHERE id % 2 = 0",
        ],
    ),
    (
        "drop a column",
        [
            "ALTER TABLE products DROP COLUMN price",
            "INSERT INTO products (id, title, qty, sku, amount) VALUES (101, 'x', 3, 's', 1.25)",
        ],
    ),
    (
        "drop a column and add one of the same name",
        [
            "ALTER TABLE products DROP COLUMN note",
            "ALTER TABLE products ADD COLUMN note integer",
            "UPDATE products SET note = id * 10 WHERE id < 4",
        ],
    ),
    (
        "widen integer to bigint and numeric precision, lengthen a varchar",
        [
            "ALTER TABLE products ALTER COLUMN qty TYPE bigint",
            "ALTER TABLE products ALTER COLUMN amount TYPE numeric(14,2)",
            "ALTER TABLE products ALTER COLUMN sku TYPE varchar(40)",
            "UPDATE products SET qty = 5000000000, sku = repeat('k', 30) WHERE id = 1",
        ],
    ),
    (
        "DDL and DML in one transaction",
        [
            "BEGIN",
            "ALTER TABLE products ADD COLUMN code text DEFAULT 'c0'",
            "UPDATE products SET code = 'c' || id WHERE id = 2",
            "DELETE FROM products WHERE id = 3",
            "COMMIT",
        ],
    ),
]


def create_postgres_tables(dsn: str) -> None:
    """``products`` (8 rows) and ``tags`` (2 rows) in the database of ``dsn``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE products (id integer PRIMARY KEY, name text, price numeric(10,2), "
            "qty integer, sku varchar(10), amount numeric(8,2))"
        )
        conn.execute("CREATE TABLE tags (id integer PRIMARY KEY, label text)")
        conn.execute("INSERT INTO tags VALUES (1, 'one'), (2, 'two')")
        for i in range(1, 9):
            conn.execute(
                "INSERT INTO products VALUES (%s, %s, %s, %s, %s, %s)",
                (i, f"p{i}", Decimal(i) + Decimal("0.25"), i, f"s{i}", Decimal(i) / 4),
            )


def run_postgres(dsn: str, statements: list[str]) -> None:
    """Run ``statements`` in order in autocommit mode (``BEGIN``/``COMMIT`` make a transaction)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


DEBEZIUM_POSTGRES_STEPS: list[tuple[str, list[str]]] = [
    *POSTGRES_STEPS[:2],  # the additions
    (
        "drop a column",
        [
            "ALTER TABLE products DROP COLUMN price",
            "INSERT INTO products (id, name, qty, sku, amount) VALUES (101, 'x', 3, 's', 1.25)",
        ],
    ),
    (
        # Without a write between them the stream would show no change at all (same name, same
        # type): Debezium's PostgreSQL records carry no DDL and no column identity.
        "drop a column, write, add one of the same name",
        [
            "ALTER TABLE products DROP COLUMN note",
            "UPDATE products SET qty = qty + 1 WHERE id = 1",
            "ALTER TABLE products ADD COLUMN note integer",
            "UPDATE products SET note = id * 10 WHERE id < 4",
        ],
    ),
    *POSTGRES_STEPS[-2:],  # the widenings, and DDL and DML in one transaction
]
"""PostgreSQL's sequence as Debezium's records can show it: no rename (no column identity in
them), and a write between a drop and an add of the same name."""


Table = tuple[dict[str, str], set[tuple[Any, ...]]]
"""A table's columns (name -> Spark type) and rows (each a sorted tuple of (column, value))."""


def mirror_of(spark: SparkSession, root: Path, name: str = PRODUCTS) -> Table:
    """A mirror's columns and rows as ``read_consistent`` reads it (empty when it has none)."""
    tables = spark_ckpt.read_consistent(spark, str(root))
    return mirror_table(tables[name]) if name in tables else ({}, set())


def newest_of(root: Path, name: str = PRODUCTS) -> Table:
    """A mirror table's newest version as delta-rs reads it (empty before its first commit).

    The columns' Spark types come from the table's own schema (Delta keeps Spark's JSON form of
    it), so they compare with :func:`mirror_of`'s.
    """
    path = root / name
    if not (path / "_delta_log").is_dir():
        return {}, set()
    table = DeltaTable(str(path))
    schema = StructType.fromJson(json.loads(table.schema().to_json()))
    read = QueryBuilder().register("t", table).execute("SELECT * FROM t")
    rows = {tuple(sorted(row.items())) for row in pa.table(read.read_all()).to_pylist()}
    return {f.name: f.dataType.simpleString() for f in schema.fields}, rows


def checkpoint_of_newest(root: Path, name: str = PRODUCTS) -> int | None:
    """The newest checkpoint whose index entry shows ``name``'s newest version (delta-rs).

    None while the index lags the table (a batch committed to the mirror, not yet published)
    or before the first publish. ``read_consistent(spark, root, checkpoint)`` then reads the
    version that :func:`newest_of` read.
    """
    path, index = root / name, root / "_checkpoints"
    if not (path / "_delta_log").is_dir() or not (index / "_delta_log").is_dir():
        return None
    newest = DeltaTable(str(path)).version()
    read = (
        QueryBuilder()
        .register("i", DeltaTable(str(index)))
        .execute(f"SELECT checkpoint_id, version FROM i WHERE \"table\" = '{name}'")
    )
    entries = pa.table(read.read_all()).to_pylist()
    if not entries:
        return None
    last = max(entries, key=lambda entry: int(entry["checkpoint_id"]))
    return int(last["checkpoint_id"]) if last["version"] == newest else None


COMMIT = re.compile(r"\d{20}\.json")


def published_version(root: Path) -> int:
    """The newest commit of a mirror root's checkpoint index (``_checkpoints``); -1 before one.

    The sink's publish writes it last, so a new one means there is a new checkpoint to read.
    """
    log = root / "_checkpoints" / "_delta_log"
    if not log.is_dir():
        return -1
    return max((int(p.name[:20]) for p in log.iterdir() if COMMIT.fullmatch(p.name)), default=-1)


def wait_mirror(
    spark: SparkSession,
    query: StreamingQuery,
    root: Path,
    step: str,
    compare: Callable[[Callable[[str], Table]], tuple[bool, Any]],
    timeout: float = 120.0,
) -> None:
    """Wait (bounded) until the mirror equals its source, while ``query`` streams.

    ``compare(read)`` reads the source and the mirror (``read(name)``) and returns whether they
    are equal and what differs. It runs at once, then each time a checkpoint is published (and
    every 10 s besides), with delta-rs's read of the newest versions (:func:`newest_of`,
    milliseconds); once that equals the source, with ``read_consistent`` (:func:`mirror_of`),
    which decides.
    Comparing through Spark on every poll took the cores the stream needed: a
    ``read_consistent`` is several Spark jobs, 1-6 s each time on two busy cores.
    """
    deadline = time.monotonic() + timeout
    # The first comparison runs at once: the step's checkpoint may be published already.
    compared, compared_at, differs = -2, 0.0, None
    while True:
        if query.exception() is not None:
            raise AssertionError(f"after '{step}' the query failed: {query.exception()}")
        version = published_version(root)
        if version >= 0 and (version != compared or time.monotonic() - compared_at >= 10.0):
            compared, compared_at = version, time.monotonic()
            equal, differs = compare(lambda name: newest_of(root, name))
            if equal:
                equal, differs = compare(lambda name: mirror_of(spark, root, name))
                if equal:
                    return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"after '{step}' the mirror did not equal its source in {timeout:.0f} s: {differs}"
            )
        time.sleep(0.1)


def wait_equal(
    spark: SparkSession,
    query: StreamingQuery,
    dsn: str,
    root: Path,
    step: str,
    name: str = PRODUCTS,
) -> None:
    """Wait (bounded) until the mirror of PostgreSQL table ``name`` equals it, while streaming."""

    def compare(read: Callable[[str], Table]) -> tuple[bool, Any]:
        source, mirror = source_table(dsn, name), read(name)
        return source == mirror, [source[0], mirror[0], sorted(source[1] ^ mirror[1], key=repr)[:4]]

    wait_mirror(spark, query, root, step, compare)


def follow_debezium_postgres(
    spark: SparkSession, query: StreamingQuery, dsn: str, root: Path
) -> None:
    """Run :data:`DEBEZIUM_POSTGRES_STEPS` and a rename on ``products`` while ``query`` mirrors.

    After each step the mirror (``read_consistent``) equals the table, and delta-rs reads the
    same; the change log holds the schema changes. The rename stops the query with
    ``MirrorSchemaError`` and publishes nothing of it.
    """
    wait_equal(spark, query, dsn, root, "the snapshot")
    for step, statements in DEBEZIUM_POSTGRES_STEPS:
        run_postgres(dsn, statements)
        wait_equal(spark, query, dsn, root, step)
    assert newest_of(root) == source_table(dsn, PRODUCTS), "delta-rs differs"
    changes = spark.read.format("delta").load(str(root / "_changes")).where("op = 's'")
    kinds = [
        change["change"]
        for row in changes.orderBy("txn_order", "event_index").collect()
        for change in json.loads(row["after"])["changes"]
    ]
    assert kinds.count("column_added") == 4, kinds  # note, flag, note again, code
    assert kinds.count("column_dropped") == 2, kinds
    assert kinds.count("column_type_changed") == 3, kinds  # qty, amount, sku

    # A rename: the stream shows name gone and title come, nothing tells it from a drop and
    # an add, so the query stops and publishes nothing of it.
    published = mirror_of(spark, root)
    run_postgres(
        dsn,
        [
            "ALTER TABLE products RENAME COLUMN name TO title",
            "UPDATE products SET qty = 1 WHERE id = 2",
        ],
    )
    wait_until(lambda: query.exception() is not None, 120, "the query did not stop")
    message = str(query.exception())
    assert "MirrorSchemaError" in message, message
    assert "rename from a drop and an add" in message, message
    assert mirror_of(spark, root) == published


MARIADB_STEPS: list[tuple[str, list[str]]] = [
    (
        "add a nullable column",
        ["ALTER TABLE products ADD COLUMN note text NULL", "UPDATE products SET note = 'n'"],
    ),
    (
        "add a column with a default existing rows read",
        [
            "ALTER TABLE products ADD COLUMN flag tinyint NOT NULL DEFAULT 1",
            "INSERT INTO products (id, name, price, qty, sku, amount, flag) "
            "VALUES (100, 'late', 1.00, 1, 's100', 2.50, 0)",
        ],
    ),
    (
        "drop a column",
        [
            "ALTER TABLE products DROP COLUMN price",
            "INSERT INTO products (id, name, qty, sku, amount) VALUES (101, 'x', 3, 's', 1.25)",
        ],
    ),
    (
        "drop a column, write, add one of the same name",
        [
            "ALTER TABLE products DROP COLUMN note",
            "UPDATE products SET qty = qty + 1 WHERE id = 1",
            "ALTER TABLE products ADD COLUMN note int NULL",
            "UPDATE products SET note = id * 10 WHERE id < 4",
        ],
    ),
    (
        "widen int to bigint and decimal precision, lengthen a varchar",
        [
            "ALTER TABLE products MODIFY qty bigint",
            "ALTER TABLE products MODIFY amount decimal(14,2)",
            "ALTER TABLE products MODIFY sku varchar(40)",
            "UPDATE products SET qty = 5000000000, sku = repeat('k', 30) WHERE id = 1",
        ],
    ),
    (
        # Debezium's MariaDB connector writes the DDL before the changes: renames are followed.
        "rename a column, and another with CHANGE",
        [
            "ALTER TABLE products RENAME COLUMN name TO title",
            "UPDATE products SET qty = qty + 1 WHERE id = 2",
            "ALTER TABLE products CHANGE sku code varchar(40)",
            "INSERT INTO products (id, title, qty, code, amount) VALUES (102, 'y', 4, 'c', 2)",
        ],
    ),
    (
        "a new table, created and written",
        [
            "CREATE TABLE extra (id int PRIMARY KEY, label varchar(20))",
            "INSERT INTO extra VALUES (1, 'e1'), (2, 'e2')",
        ],
    ),
]
"""MariaDB's sequence: the ``debezium-json`` test runs it through Debezium's MariaDB connector,
the ``mysql`` connector's test reads it from the binlog itself."""


def mariadb_table(server: MariaDbServer, database: str, name: str) -> set[tuple[Any, ...]]:
    """A MariaDB table's rows as sets of ``(column, value)`` pairs (PyMySQL's values)."""
    with server.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {name}")
        columns = [d[0] for d in cursor.description or ()]
        return {tuple(sorted(zip(columns, row, strict=True))) for row in cursor.fetchall()}
