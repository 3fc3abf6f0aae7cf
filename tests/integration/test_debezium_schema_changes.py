"""Mirrors follow a table through migrations in a log Debezium itself writes (PostgreSQL, MariaDB).

Debezium 3.6.1 captures ``public.products`` and ``public.tags`` of a real PostgreSQL server into
JSONL files with schemas (``schemas.enable=true``, source types propagated); one query streams
them (``debezium-json``, ``columnTypes=true``) into ``delta-2pc`` ``mode=mirror`` while the test
migrates ``products``: add a nullable column, add one with a default existing rows read, drop,
drop and add again under the same name with a write in between, widen ``integer`` to ``bigint``
and ``numeric`` precision, lengthen a ``varchar``, DDL and DML in one transaction. After each
step the mirror, read through ``read_consistent`` (delta-spark), equals the table, and delta-rs
reads the same. Debezium's PostgreSQL records carry no column identity, so a rename is a column
gone and another come: the query stops with ``MirrorSchemaError`` saying so and publishes
nothing of it, instead of guessing.

MariaDB (Debezium 3.5.0's connector, binlog): the same sequence where MariaDB can run it (its DDL
commits on its own, so there is no DDL + DML transaction), two renames (``RENAME COLUMN`` and
``CHANGE``), which Debezium's DDL events tell from a drop and an add, and a table created while
the query streams, captured and mirrored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import schema_migrations
from conftest import wait_until
from debezium_writer import DebeziumWriter
from mariadb_server import MariaDbServer
from pg_cluster import PASSWORD, USER, PgCluster

import spark_ckpt

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

pytestmark = pytest.mark.integration

PRODUCTS, TAGS = schema_migrations.PRODUCTS, schema_migrations.TAGS
KEYS = f"{PRODUCTS}:id;{TAGS}:id"


def _writer(server: PgCluster, dsn: str, tmp_path: Path) -> DebeziumWriter:
    return DebeziumWriter(
        "postgres",
        tmp_path / "log",
        tmp_path / "writer",
        host="127.0.0.1",
        port=server.port,
        user=USER,
        password=PASSWORD,
        database=dsn.rsplit("/", 1)[1],
        tables=f"{PRODUCTS},{TAGS}",
        slot="dbz_schema",
        publication="dbz_schema",
        roll_records=50,
        roll_ms=200,
        # The source's own types in each column's parameters: a varchar length is seen.
        props={"column.propagate.source.type": ".*"},
    )


def _start(spark: SparkSession, tmp_path: Path, keys: str = KEYS) -> StreamingQuery:
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("columnTypes", "true")
        .option("keyColumns", keys)
        .load(str(tmp_path / "log"))
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", str(tmp_path / "mirror"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def test_mirror_follows_migrations_debezium_writes_and_refuses_a_rename_it_cannot_tell(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_server: PgCluster,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    schema_migrations.create_postgres_tables(pg_dsn)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    root = tmp_path / "mirror"
    writer = _writer(pg_server, pg_dsn, tmp_path).start()
    query = _start(spark, tmp_path)
    try:
        schema_migrations.follow_debezium_postgres(spark, query, pg_dsn, root)
    finally:
        query.stop()
        writer.close()


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


def _mariadb_table(server: MariaDbServer, database: str, name: str) -> set[tuple[Any, ...]]:
    with server.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {name}")
        columns = [d[0] for d in cursor.description or ()]
        return {tuple(sorted(zip(columns, row, strict=True))) for row in cursor.fetchall()}


def _mirror_rows(spark: SparkSession, root: Path, table: str) -> set[tuple[Any, ...]] | None:
    tables = spark_ckpt.read_consistent(spark, str(root))
    if table not in tables:
        return None
    return {tuple(sorted(r.asDict().items())) for r in tables[table].collect()}


def test_mirror_follows_migrations_debezium_writes_from_mariadb(
    spark: SparkSession,
    control: spark_ckpt.Control,
    mariadb_server: MariaDbServer,
    mariadb_database: str,
    tmp_path: Path,
) -> None:
    server, database = mariadb_server, mariadb_database
    with server.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE products (id int PRIMARY KEY, name text, price decimal(10,2), "
            "qty int, sku varchar(10), amount decimal(8,2))"
        )
        cursor.execute("CREATE TABLE tags (id int PRIMARY KEY, label text)")
        cursor.execute("INSERT INTO tags VALUES (1, 'one'), (2, 'two')")
        for i in range(1, 9):
            cursor.execute(
                "INSERT INTO products VALUES (%s, %s, %s, %s, %s, %s)",
                (i, f"p{i}", f"{i}.25", i, f"s{i}", f"{i / 4:.2f}"),
            )
    names = ("products", "tags", "extra")
    writer = DebeziumWriter(
        "mariadb",
        tmp_path / "log",
        tmp_path / "writer",
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password,
        database=database,
        tables=",".join(f"{database}.{name}" for name in names),
        roll_records=50,
        roll_ms=200,
        props={"column.propagate.source.type": ".*"},
    ).start()
    keys = ";".join(f"{database}.{name}:id" for name in names)
    root = tmp_path / "mirror"
    query = _start(spark, tmp_path, keys)

    def wait_equal(step: str, name: str = "products") -> None:
        seen: list[Any] = []

        def equal() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"after '{step}' the query failed: {query.exception()}")
            if not (root / "_checkpoints").exists():
                return False
            source = _mariadb_table(server, database, name)
            mirror = _mirror_rows(spark, root, f"{database}.{name}")
            seen[:] = [sorted(source ^ (mirror or set()), key=repr)[:4]]
            return source == mirror

        wait_until(equal, 120, f"after '{step}' the mirror never equalled the table: {seen}")

    try:
        wait_equal("the snapshot")
        for step, statements in MARIADB_STEPS:
            with server.connect(database) as conn, conn.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
            wait_equal(step, "extra" if step.startswith("a new table") else "products")
        tables = spark_ckpt.read_consistent(spark, str(root))
        types = {f.name: f.dataType.simpleString() for f in tables[f"{database}.products"].schema}
        assert (types["qty"], types["amount"], types["flag"]) == (
            "bigint",
            "decimal(14,2)",
            "smallint",
        ), types
        changes = spark.read.format("delta").load(str(root / "_changes")).where("op = 's'")
        kinds = [
            change["change"]
            for row in changes.collect()
            for change in json.loads(row["after"])["changes"]
        ]
        assert "table_created" in kinds, kinds
        assert kinds.count("column_renamed") == 2, kinds
        assert kinds.count("column_type_changed") == 3, kinds
    finally:
        query.stop()
        writer.close()
