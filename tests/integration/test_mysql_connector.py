"""The ``mysql`` connector against a real MariaDB (Debian's 10.11): its binlog, read natively.

A live workload on two captured tables (multi-table transactions, a 300-row transaction, updates,
deletes, a primary-key update, a rollback, writes to a table not captured) streams into
``delta-2pc`` through a crash of the server (SIGKILL; the query stops with a typed error) and the
query's restart once the server is back: every committed transaction lands in exactly one Delta
version, whole, once and in commit order, and the change log folded by key equals the tables. The
snapshot: both ways to its consistent position (lock-free, and under the global read lock), typed
values equal to the binlog's for every column type, and driver kills while it reads and once its
batch is pre-committed. A TRUNCATE of a captured table stops the query with a typed error instead
of leaving a mirror that differs; MariaDB's migration sequence (columns added with and without
defaults, dropped, widened, renamed two ways) is followed into a typed mirror equal to the table at
every step. The checks at a start name the setting, the grant or the table (and never the
password), and a restart whose binlog file was purged is a data-loss error. Typed mirrors
(``columnTypes=true``) equal the tables value for value, a table of every column type at its
extremes included.

No MySQL 8 server is reachable from these machines (Debian ships MariaDB only, and nothing but
Debian's, PyPI's and Maven Central's mirrors is on the network): MariaDB is the server tested.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import schema_migrations
from changelog_checks import whole_once
from conftest import wait_until

import spark_ckpt
from harness.delta_reads import read_delta
from harness.faults.debezium import delta_changes, delta_txn_ids
from harness.faults.mysql import run_scenario
from harness.servers.mariadb import PASSWORD, MariaDbServer
from harness.workloads import mysql as workload
from harness.workloads import mysql_types as every_type
from spark_ckpt.errors import (
    SourceConnectionError,
    SourcePrivilegeError,
    SourceSettingError,
    TableCaptureError,
)
from spark_ckpt.model.options import OptionReader
from spark_ckpt.sources.mysql.binlog_offset import BinlogPosition
from spark_ckpt.sources.mysql.options import MySqlOptions
from spark_ckpt.sources.mysql.server import check_server
from spark_ckpt.sources.mysql.snapshot import consistent_snapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

pytestmark = pytest.mark.integration


def _options(server: MariaDbServer, database: str, **given: str) -> dict[str, str]:
    options = {
        "connector": "mysql",
        "host": server.host,
        "port": str(server.port),
        "user": server.user,
        "password": server.password,
        "serverId": "7101",
        "tables": f"{database}.orders,{database}.items",
        "snapshot": "never",
    }
    return options | given


def _query(spark: SparkSession, options: dict[str, str], tmp_path: Path) -> StreamingQuery:
    """The source into a ``delta-2pc`` change log under ``tmp_path``, started."""
    return (
        spark.readStream.format("txn-cdc")
        .options(**options)
        .option("maxChangesPerTrigger", "25")
        .load()
        .writeStream.format("delta-2pc")
        .option("path", str(tmp_path / "changes"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def _start(spark: SparkSession, options: dict[str, str], tmp_path: Path) -> StreamingQuery:
    """:func:`_query`, once its first trigger fixed where it reads from."""
    return _started(_query(spark, options, tmp_path))


def _started(query: StreamingQuery) -> StreamingQuery:
    """``query`` once its first trigger fixed where it reads from (or it failed: raises)."""
    # snapshot=never captures what commits after the first trigger fixed the initial offset.
    wait_until(
        lambda: (
            query.exception() is not None
            or query.lastProgress is not None
            or query.status["message"] == "Waiting for data to arrive"
        ),
        120,
        "the query's first trigger did not finish",
    )
    assert query.exception() is None, query.exception()
    return query


def _landed(query: StreamingQuery, table: Path, count: int) -> bool:
    """Whether ``count`` transactions are in the Delta table; raises if the query failed."""
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")
    return len(delta_txn_ids(table)) >= count


def _transactions(server: MariaDbServer, database: str, batches: list[list[str]]) -> None:
    """Each inner list in one transaction (committed), in order."""
    with server.connect(database) as conn, conn.cursor() as cursor:
        for statements in batches:
            conn.begin()
            for sql in statements:
                cursor.execute(sql)
            conn.commit()


def test_a_live_workload_lands_whole_once_in_order_through_a_server_crash_and_restart(
    spark: SparkSession,
    control: spark_ckpt.Control,
    mariadb_server: MariaDbServer,
    mariadb_database: str,
    tmp_path: Path,
) -> None:
    server, database = mariadb_server, mariadb_database
    workload.create_tables(server, database)
    # A 1 kB driver buffer spills every chunk of read changes to files, and partitions of 100
    # changes cut the 300-row transaction into parts: each still lands whole in one version.
    spill = tmp_path / "spill"
    options = _options(
        server,
        database,
        streamBufferSize="1k",
        changesPerPartition="100",
        snapshotDir=str(spill),
    )
    first = [
        [
            "INSERT INTO orders VALUES (2, 'ann', 10.50, '2026-11-28 10:00:00.123456'), "
            "(3, 'bob', 0.01, '2026-11-28 10:01:00')",
            "INSERT INTO items VALUES (1, 2, 1, 'a'), (2, 2, 2, NULL), "
            "(18446744073709551615, 3, 3, 'max unsigned')",
            "INSERT INTO other VALUES (1, 1)",  # not captured: never delivered
        ],
        ["UPDATE orders SET amount = amount * 2 WHERE id = 2", "DELETE FROM items WHERE id = 1"],
        ["UPDATE orders SET id = 200 WHERE id = 3"],  # a primary-key update
        [
            "INSERT INTO items (id, order_id, qty, note) VALUES "
            + ", ".join(f"({100 + i}, 2, {i}, 'bulk {i}')" for i in range(300))
        ],
        ["UPDATE orders SET customer = 'before, updated' WHERE id = 1"],
    ]
    query = _start(spark, options, tmp_path)
    try:
        _transactions(server, database, first)
        with server.connect(database) as conn, conn.cursor() as cursor:
            conn.begin()
            cursor.execute("INSERT INTO orders VALUES (999, 'rolled back', 1, NULL)")
            conn.rollback()
        _transactions(server, database, [["INSERT INTO other VALUES (2, 2)"]])
        table = tmp_path / "changes"
        wait_until(lambda: _landed(query, table, len(first)), 120, "the first run lagged")
        latest = query.lastProgress["sources"][0]["latestOffset"]
        status = (json.loads(latest) if isinstance(latest, str) else latest)["status"]
        assert status["connector"] == "mysql", status
        assert status["server"] == "mariadb", status
        assert status["lagSeconds"] is not None, status

        # The server crashes (SIGKILL) under the running query: a typed error, no password.
        server.kill()
        wait_until(lambda: query.exception() is not None, 120, "the crash did not stop the query")
        message = str(query.exception())
        assert "SourceConnectionError" in message, message
        assert server.password not in message
    finally:
        query.stop()

    # The server is back (a new binlog file after its crash recovery) and commits more while
    # the query is down: the query's restart reads them from its offset, in the old file.
    server.start()
    second = [[f"UPDATE items SET qty = qty + {i + 1} WHERE id = {100 + i}"] for i in range(8)]
    _transactions(server, database, second)
    query = _start(spark, options, tmp_path)
    try:
        third = [
            ["DELETE FROM items WHERE id BETWEEN 150 AND 160", "UPDATE orders SET amount = 3"],
        ]
        _transactions(server, database, third)
        expected = len(first) + len(second) + len(third)
        wait_until(lambda: _landed(query, table, expected), 120, "the restart lagged")

        rows = delta_changes(table)
        _check_log(rows, expected, database)
        folded = workload.fold(rows)
        for name in workload.KEYS:  # orders' row 1 predates the query: its update brings it whole
            assert folded[name] == workload.source_rows(server, database, name), name

        # A TRUNCATE of a captured table cannot be carried as rows: the query stops, naming it.
        server.execute("TRUNCATE TABLE orders", database)
        wait_until(lambda: query.exception() is not None, 120, "the TRUNCATE did not stop it")
        message = str(query.exception())
        assert "UnsupportedChangeError" in message, message
        assert f"{database}.orders" in message, message
    finally:
        query.stop()
    assert len(delta_txn_ids(table)) == expected, "a row of the TRUNCATE's batch was published"
    stream_spill = spill / "stream"
    assert stream_spill.exists(), "the 1 kB buffer spilled nothing"
    assert not any(stream_spill.iterdir()), "spilled changes outlived the query"


def _check_log(rows: list[dict[str, Any]], expected: int, database: str) -> None:
    """Each transaction whole in one version, once, numbered and versioned in commit order."""
    by_txn = whole_once(rows)
    assert len(by_txn) == expected, sorted(by_txn)
    orders = sorted({(r["txn_order"], r["version"], r["txn_id"]) for r in rows})
    assert [o for o, _, _ in orders] == list(range(expected)), "txn_order is not 0..n-1"
    assert [v for _, v, _ in orders] == sorted(v for _, v, _ in orders), "versions out of order"
    assert max(len(t) for t in by_txn.values()) == 300, "the large transaction was split"
    assert {r["table"] for r in rows} == {f"{database}.orders", f"{database}.items"}
    assert not any("rolled back" in (r["after"] or "") for r in rows)
    update = next(r for r in rows if r["op"] == "u" and '"id":200' in r["after"])
    assert json.loads(update["before"])["id"] == 3, update  # the key update's both images


def test_settings_grants_and_tables_are_checked_at_the_start_by_name(
    mariadb_server: MariaDbServer, mariadb_database: str
) -> None:
    server, database = mariadb_server, mariadb_database
    workload.create_tables(server, database)
    server.execute("CREATE TABLE nokey (a int, b text)", database)

    def check(**given: str) -> None:
        options = _options(server, database, **given)
        options.pop("connector")
        reader = OptionReader(options, "txn-cdc", [*MySqlOptions.NAMES, "gate", "path"])
        check_server(MySqlOptions.parse(reader))

    check()  # the test server is set up as the connector needs
    with pytest.raises(TableCaptureError, match="no primary key"):
        check(tables=f"{database}.nokey")
    with pytest.raises(SourceConnectionError) as refused:
        check(password=PASSWORD + "-wrong")
    assert PASSWORD not in str(refused.value)

    server.execute("CREATE USER 'weak'@'%%' IDENTIFIED BY %s", params=(PASSWORD,), admin=True)
    try:
        server.execute(f"GRANT SELECT ON `{database}`.* TO 'weak'@'%'", admin=True)
        with pytest.raises(SourcePrivilegeError, match="REPLICATION SLAVE") as weak:
            check(user="weak")
        assert PASSWORD not in str(weak.value)
    finally:
        server.execute("DROP USER 'weak'@'%'", admin=True)

    for setting, weaker in (("binlog_row_metadata", "MINIMAL"), ("binlog_format", "MIXED")):
        server.execute(f"SET GLOBAL {setting} = '{weaker}'", admin=True)
        try:
            with pytest.raises(SourceSettingError, match=f"{setting}={weaker}"):
                check()
        finally:
            needed = "FULL" if setting == "binlog_row_metadata" else "ROW"
            server.execute(f"SET GLOBAL {setting} = '{needed}'", admin=True)


def test_a_restart_after_its_binlog_was_purged_is_a_data_loss_error(
    spark: SparkSession,
    control: spark_ckpt.Control,
    mariadb_server: MariaDbServer,
    mariadb_database: str,
    tmp_path: Path,
) -> None:
    server, database = mariadb_server, mariadb_database
    workload.create_tables(server, database)
    options = _options(server, database)
    query = _start(spark, options, tmp_path)
    try:
        _transactions(server, database, [["INSERT INTO orders VALUES (5, 'x', 1, NULL)"]])
        wait_until(lambda: _landed(query, tmp_path / "changes", 1), 120, "nothing landed")
    finally:
        query.stop()
    # A commit the query has not read, then its binlog purged: that change is lost (a file
    # purged with nothing unread in it is not: the query resumes from its GTID state).
    _transactions(server, database, [["INSERT INTO orders VALUES (6, 'y', 1, NULL)"]])
    server.execute("FLUSH BINARY LOGS", admin=True)
    newest = server.query("SHOW BINARY LOGS", admin=True)[-1][0]

    def purged() -> bool:
        # MariaDB keeps a file until its binlog checkpoint is written (a moment after the
        # FLUSH), and says nothing: purge again until only the newest file is left.
        server.execute(f"PURGE BINARY LOGS TO '{newest}'", admin=True)
        return [row[0] for row in server.query("SHOW BINARY LOGS", admin=True)] == [newest]

    wait_until(purged, 30, "the older binlog files were never purged")
    restarted = _query(spark, options, tmp_path)
    with pytest.raises(Exception, match="DataLossError") as lost:
        restarted.awaitTermination(120)
    assert "purged" in str(lost.value)
    assert PASSWORD not in str(lost.value)


def test_a_driver_killed_in_its_snapshot_and_mid_stream_loses_and_repeats_nothing(
    spark: SparkSession,
    mariadb_server: MariaDbServer,
    mariadb_database: str,
    tmp_path: Path,
) -> None:
    """Real SIGKILLs of the driver (its JVM and Python workers) in the snapshot and mid-stream.

    While the snapshot reads the tables (the restart takes it again), once the snapshot's batch
    is pre-committed (the restart delivers the same spill), and after a stream batch's
    pre-commit (the restart reads it again from its logged binlog positions), while transactions
    commit beside the drivers (``harness.faults.mysql``); the clean run to the end is in the
    shared session.
    """
    problems = run_scenario(spark, mariadb_server, mariadb_database, tmp_path)
    assert problems == [], problems


@pytest.mark.parametrize("lock_free", [True, False], ids=["lock-free", "global-read-lock"])
def test_a_snapshot_sees_exactly_the_commits_before_the_binlog_position_it_reports(
    mariadb_server: MariaDbServer, mariadb_database: str, lock_free: bool
) -> None:
    """Both ways to a consistent snapshot, on MariaDB, which has both.

    Lock-free (MariaDB's and Percona's ``binlog_snapshot_file``/``_position``), and under the
    global read lock (MySQL's only way, as Debezium's minimal locking), which needs ``RELOAD``
    (root here). The position is the binlog's end as the snapshot started; a commit after it is
    outside the snapshot's view and after its position; and the lock is gone once the snapshot
    has started (a writer with a short lock wait gets through).
    """
    server, database = mariadb_server, mariadb_database
    server.execute("CREATE TABLE snap (id int PRIMARY KEY)", database)
    server.execute("INSERT INTO snap VALUES (1), (2)", database)

    def binlog_end() -> BinlogPosition:
        row = server.query("SHOW MASTER STATUS")[0]
        return BinlogPosition(str(row[0]), int(row[1]))

    before = binlog_end()
    with server.connect(database, admin=not lock_free) as conn:
        position, gtid = consistent_snapshot(conn, lock_free)
        with server.connect(database) as writer, writer.cursor() as cursor:
            cursor.execute("SET SESSION lock_wait_timeout = 10")
            cursor.execute("INSERT INTO snap VALUES (3)")
        with conn.cursor() as cursor:
            cursor.execute("SELECT id FROM snap ORDER BY id")
            seen = [row[0] for row in cursor.fetchall()]
        conn.rollback()
    assert (position, seen) == (before, [1, 2])
    assert binlog_end() > position, "the commit after the snapshot is after its position"
    assert gtid is not None, "MariaDB gives the snapshot's GTID state"
    assert gtid == server.query(f"SELECT BINLOG_GTID_POS('{before.file}', {before.pos})")[0][0]


def _typed_mirror(
    spark: SparkSession,
    server: MariaDbServer,
    database: str,
    tables: list[str],
    tmp_path: Path,
    snapshot: str = "never",
) -> StreamingQuery:
    """``tables`` into typed mirrors under ``tmp_path / "mirror"`` (``columnTypes=true``)."""
    names = ",".join(f"{database}.{name}" for name in tables)
    return (
        spark.readStream.format("txn-cdc")
        .options(**_options(server, database, tables=names, snapshot=snapshot))
        .option("snapshotDir", str(tmp_path / "snapshot"))
        .option("columnTypes", "true")
        .load()
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", str(tmp_path / "mirror"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def test_typed_mirrors_equal_the_tables_value_for_value_while_the_query_streams(
    spark: SparkSession,
    control: spark_ckpt.Control,
    mariadb_server: MariaDbServer,
    mariadb_database: str,
    tmp_path: Path,
) -> None:
    """``mode=mirror`` with ``columnTypes=true``: typed tables equal the sources value for value.

    ``every_type`` has every column type at its extremes, written before the query starts: its
    rows come from the snapshot (a query, typed from the catalog). ``streamed_type`` is the same
    table with the same rows written after the start: its rows come from the binlog (typed from
    the table maps). Both mirrors equal the table, and each other, value for value and type for
    type; where a mirror keeps text, the comparison is with the server's own text.
    """
    server, database = mariadb_server, mariadb_database
    workload.create_tables(server, database)
    server.execute(every_type.TABLE, database)
    for statement in every_type.STATEMENTS:
        server.execute(statement, database)
    streamed = every_type.TABLE.replace("every_type", "streamed_type")
    server.execute(streamed, database)
    root = tmp_path / "mirror"
    tables = [*workload.KEYS, "every_type", "streamed_type"]
    query = _typed_mirror(spark, server, database, tables, tmp_path, snapshot="initial")
    try:
        _started(query)
        for statement in every_type.STATEMENTS:
            server.execute(statement.replace("every_type", "streamed_type"), database)
        workload.run_transactions(server, database, 20, seed=4)

        def mirrored(name: str) -> dict[Any, dict[str, Any]]:
            path = root / f"{database}.{name}"
            if not (path / "_delta_log").is_dir():
                return {}
            rows = read_delta(str(path)).to_pylist()
            return {row["id"]: row for row in rows}

        def sources() -> dict[str, dict[Any, dict[str, Any]]]:
            found = {
                name: workload.source_rows(server, database, name, as_json=False)
                for name in workload.KEYS
            }
            return found | {
                "every_type": every_type.source_rows(server, database),
                "streamed_type": every_type.source_rows(server, database, "streamed_type"),
            }

        def equal() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            return all(mirrored(name) == rows for name, rows in sources().items())

        wait_until(equal, 120, "the mirrors never equalled the tables")
    finally:
        query.stop()
    for name in ("every_type", "streamed_type"):
        schema = spark.read.format("delta").load(str(root / f"{database}.{name}")).schema
        assert {f.name: f.dataType.simpleString() for f in schema.fields} == EVERY_TYPE_MIRRORED
    assert mirrored("every_type") == every_type.source_rows(server, database)
    assert mirrored("every_type") == mirrored("streamed_type")
    changes = spark.read.format("delta").load(str(root / "_changes"))
    ops = {(r["table"].split(".")[1], r["op"]) for r in changes.select("table", "op").collect()}
    assert ("every_type", "r") in ops, "every_type's rows did not come from the snapshot"
    assert ("streamed_type", "r") not in ops, "streamed_type was empty at the snapshot"
    schema_changes = [r["after"] for r in changes.where("op = 's'").collect()]
    assert not schema_changes, f"a snapshot's schema differs from the binlog's: {schema_changes}"


EVERY_TYPE_MIRRORED = {
    "id": "int", "t": "tinyint", "tu": "smallint", "s": "smallint", "su": "int", "m": "int",
    "mu": "int", "i": "int", "iu": "bigint", "b": "bigint", "bu": "decimal(20,0)",
    "d": "decimal(12,4)", "dw": "string", "f": "float", "dbl": "double", "dt": "date",
    "dtm": "timestamp_ntz", "dtm6": "timestamp_ntz", "ts": "timestamp", "ts3": "timestamp",
    "tm": "string", "tm6": "string", "y": "smallint", "c": "string", "vc": "string",
    "tx": "string", "l1": "string", "bin": "binary", "vb": "binary", "bl": "binary",
    "js": "string", "e": "string", "st": "string", "bt1": "boolean", "bt": "bigint",
    "bt64": "decimal(20,0)",
}  # fmt: skip
"""The Spark types of ``every_type``'s mirror (delta-spark reads the schema)."""


def test_a_typed_mirror_follows_migrations_read_from_the_binlog(
    spark: SparkSession,
    control: spark_ckpt.Control,
    mariadb_server: MariaDbServer,
    mariadb_database: str,
    tmp_path: Path,
) -> None:
    """MariaDB's migration sequence (the ``debezium-json`` test's), followed from table maps.

    Renames come from the ALTER statements (``RENAME COLUMN`` and ``CHANGE``), so the mirror
    keeps the renamed columns' values; an added column's existing rows read its default, from
    the server's catalog. The mirror equals the table after every step: delta-rs reads it while
    the query streams, ``read_consistent`` (Spark) reads each step's checkpoint once it stopped.
    """
    server, database = mariadb_server, mariadb_database
    server.execute(
        "CREATE TABLE products (id int PRIMARY KEY, name text, price decimal(10,2), qty int, "
        "sku varchar(10), amount decimal(8,2))",
        database,
    )
    root, name = tmp_path / "mirror", f"{database}.products"
    # The table is empty at the start: the snapshot gives no batch, the stream starts there.
    query = _typed_mirror(spark, server, database, ["products"], tmp_path, snapshot="initial")
    # delta-rs reads the mirror while the query streams, read_consistent each step's checkpoint
    # once it stopped (MirrorSteps: beside the query it took 20-90 s a step on two loaded cores).
    steps = schema_migrations.MirrorSteps(root)
    products = partial(schema_migrations.mariadb_table, server, database, "products")

    def wait_equal(step: str) -> None:
        steps.wait_equal(query, step, name, products, rows_only=True)

    try:
        _started(query)
        with server.connect(database) as conn, conn.cursor() as cursor:
            for i in range(1, 9):  # written after the start: streamed, not snapshotted
                cursor.execute(
                    "INSERT INTO products VALUES (%s, %s, %s, %s, %s, %s)",
                    (i, f"p{i}", f"{i}.25", i, f"s{i}", f"{i / 4:.2f}"),
                )
        wait_equal("the first rows")
        for step, statements in schema_migrations.MARIADB_STEPS:
            if step.startswith("a new table"):
                continue  # a table captured before it exists is refused at the start
            for statement in statements:
                server.execute(statement, database)
            wait_equal(step)
    finally:
        query.stop()
    assert len(steps.published) == 7, steps.published  # the first rows, six migrations
    steps.check(spark)
    tables = spark_ckpt.read_consistent(spark, str(root))
    types = {f.name: f.dataType.simpleString() for f in tables[name].schema}
    assert (types["qty"], types["amount"], types["flag"], types["title"]) == (
        "bigint",
        "decimal(14,2)",
        "tinyint",
        "string",
    ), types
    changes = spark.read.format("delta").load(str(root / "_changes")).where("op = 's'")
    kinds = [c["change"] for row in changes.collect() for c in json.loads(row["after"])["changes"]]
    assert kinds.count("column_renamed") == 2, kinds
    assert kinds.count("column_added") == 3, kinds
