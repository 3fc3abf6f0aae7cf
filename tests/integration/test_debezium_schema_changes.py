"""Mirrors follow a table through migrations in a log Debezium itself writes (PostgreSQL, MariaDB).

Debezium 3.6.1 captures ``public.products`` and ``public.tags`` of a real PostgreSQL server into
JSONL files with schemas (``schemas.enable=true``, source types propagated); one query streams
them (``debezium-json``, ``columnTypes=true``) into ``delta-2pc`` ``mode=mirror`` while the test
migrates ``products``: add a nullable column, add one with a default existing rows read, drop,
drop and add again under the same name with a write in between, widen ``integer`` to ``bigint``
and ``numeric`` precision, lengthen a ``varchar``, DDL and DML in one transaction. After each step
the mirror equals the table, read by delta-rs while the query streams and, at the same checkpoint,
by ``read_consistent`` (delta-spark) once it stopped. Debezium's PostgreSQL records carry no column
identity, so a rename is a column gone and another come: the query stops with ``MirrorSchemaError``
saying so and publishes nothing of it, instead of guessing.

MariaDB (Debezium 3.5.0's connector, binlog): the same sequence where MariaDB can run it (its DDL
commits on its own, so there is no DDL + DML transaction), two renames (``RENAME COLUMN`` and
``CHANGE``), which Debezium's DDL events tell from a drop and an add, and a table created while
the query streams, captured and mirrored. Last, real SIGKILLs of the driver around schema
changes of MariaDB's log lose and repeat nothing.
"""

from __future__ import annotations

import json
import re
import shutil
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import schema_migrations
from changelog_checks import whole_once
from conftest import wait_until

import spark_ckpt
from harness.faults.debezium import DebeziumDriver, delta_changes, delta_txn_ids, mirror_log
from harness.servers.mariadb import MariaDbServer
from harness.servers.postgres import PASSWORD, USER, PgCluster
from harness.workloads.debezium import DebeziumWriter

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


@pytest.mark.soak
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


@pytest.mark.soak
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

    steps = schema_migrations.MirrorSteps(root)

    def wait_equal(step: str, name: str = "products") -> None:
        table = partial(schema_migrations.mariadb_table, server, database, name)
        steps.wait_equal(query, step, f"{database}.{name}", table, rows_only=True)

    try:
        wait_equal("the snapshot")
        for step, statements in schema_migrations.MARIADB_STEPS:
            with server.connect(database) as conn, conn.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
            wait_equal(step, "extra" if step.startswith("a new table") else "products")
        # delta-rs reads the evolved mirror (renamed, dropped, widened columns) as delta-spark.
        evolved = schema_migrations.newest_of(root, f"{database}.products")[1]
        source = schema_migrations.mariadb_table(server, database, "products")
        assert evolved == source, "delta-rs differs"
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
    steps.check(spark)


MARIADB_LOG = Path(__file__).resolve().parents[1] / "fixtures/debezium/schema-changes-mariadb-3.5.0"


def _mirrors(spark: SparkSession, root: Path) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    """Each mirror as ``read_consistent`` reads it: its columns and its rows, sorted."""
    return {
        name: (frame.columns, sorted((tuple(r) for r in frame.collect()), key=repr))
        for name, frame in spark_ckpt.read_consistent(spark, str(root)).items()
    }


@pytest.mark.soak
def test_driver_killed_around_schema_changes_loses_and_repeats_nothing(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """Real SIGKILLs of the driver after a schema change's manifest and inside its mirror apply.

    The log Debezium wrote from MariaDB (``schema-changes-mariadb-3.5.0``), three changes per
    batch, so nearly every batch holds a schema change. Killed after batch 2's manifest and
    while batch 4's mirrors are committed, then run to the end: the mirrors equal those of one
    clean run of the same log, and the change log holds every transaction whole, once.
    """
    log = tmp_path / "log"
    shutil.copytree(MARIADB_LOG, log, ignore=shutil.ignore_patterns("*.txt"))
    found = re.search(r'"db":"([^"]+)"', (log / "0000000001.jsonl").read_text())
    assert found is not None
    keys = {f"{found.group(1)}.{name}": ["id"] for name in ("products", "tags", "extra")}
    mirror_log(spark, control, log, tmp_path / "clean", tmp_path / "clean-ckpt", keys)
    expected = delta_txn_ids(tmp_path / "clean" / "_changes")

    killed = tmp_path / "killed"
    source = {
        "connector": "debezium-json",
        "path": str(log),
        "columnTypes": "true",
        "keyColumns": ";".join(f"{t}:id" for t in keys),
    }
    driver = DebeziumDriver(
        log, killed, tmp_path / "ckpt", tmp_path / "driver", source=source, sink={"mode": "mirror"}
    )
    try:
        for fault in ("after_manifest:2", "during_mirror:4"):
            driver.start(fault=fault, max_changes=3).wait_killed(180)
        driver.start(max_changes=3)
        wait_until(
            lambda: delta_txn_ids(killed / "_changes") >= expected,
            180,
            f"the restarted driver did not finish the log; stderr {driver.stderr_file}",
        )
        driver.stop(180)
    finally:
        driver.kill()
    rows = delta_changes(killed / "_changes")
    whole_once(rows)
    clean_rows = delta_changes(tmp_path / "clean" / "_changes")
    assert sorted((r["txn_id"], r["event_index"], r["op"]) for r in rows) == sorted(
        (r["txn_id"], r["event_index"], r["op"]) for r in clean_rows
    )
    assert _mirrors(spark, killed) == _mirrors(spark, tmp_path / "clean")
