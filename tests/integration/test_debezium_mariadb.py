"""The debezium-json connector on a log Debezium itself writes from MariaDB (binlog, GTIDs).

Debezium 3.5.0's MariaDB connector captures a fresh database of the test server
(``debezium_mariadb_capture``); each committed transaction can be found in the Delta table under
its GTID, holding the ``txlog`` row it wrote. The finished log is then mirrored
(``mode=mirror``) and each mirror, read back with delta-rs, equals its table.
"""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changelog_checks import whole_once
from conftest import wait_until
from debezium_mariadb_capture import (
    ACCOUNTS,
    ADDED,
    KEYS,
    MICROS,
    NUMERIC,
    ZONED,
    Workload,
    assert_folds_to_tables,
    create_schema,
    exact,
    large_transaction,
    snapshot_published,
    writer_for,
)

import spark_ckpt
from harness.faults.debezium import delta_changes, delta_mirrors, delta_txn_ids, mirror_log
from harness.servers.mariadb import MariaDbServer
from harness.workloads.debezium import DebeziumWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter


MIRROR_TYPES = {
    **dict.fromkeys(NUMERIC, "string"),  # decimal.handling.mode=string: every digit, as text
    **dict.fromkeys(MICROS, "timestamp[us]"),  # timestamp_ntz: the wall clock, as written
    **dict.fromkeys(ZONED, "timestamp[us, tz=UTC]"),  # timestamp: the instant
    ADDED[1]: "string",
}
"""The Arrow types (delta-rs) of the mirrors' columns this test checks by type."""


def mirrored_value(column: str, value: Any) -> Any:
    """A mirror's value (delta-rs) in :func:`exact`'s spelling: decimals by digits and scale."""
    if column in NUMERIC and value is not None:
        return Decimal(value).as_tuple()
    return value


def query(spark: SparkSession, log: Path, table: Path) -> DataStreamWriter:
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", "500")
        .load(str(log))
        .writeStream.format("delta-2pc")
        .option("path", str(table))
        .trigger(processingTime="200 milliseconds")
    )


def repeated_changes(writer: DebeziumWriter) -> tuple[int, int]:
    """Change events and ``END`` records the published files hold more than once.

    A change event is named by its GTID and ``total_order``; Debezium's repeats after the
    SIGKILL are the only way one can appear twice.
    """
    changes: Counter[tuple[str, int]] = Counter()
    ends: Counter[str] = Counter()
    for value in writer.read_values():
        payload = value.get("payload") if value is not None else None
        if payload is None:
            continue
        if payload.get("status") == "END":
            ends[payload["id"]] += 1
        elif payload.get("op") in ("c", "u", "d") and payload.get("transaction"):
            block = payload["transaction"]
            changes[(block["id"], block["total_order"])] += 1
    return (
        sum(n - 1 for n in changes.values() if n > 1),
        sum(n - 1 for n in ends.values() if n > 1),
    )


def skipped_of(query: Any) -> dict[str, int]:
    """What the query's source skipped, as its last progress event reports it."""
    progress = query.lastProgress
    if progress is None:
        return {}
    latest = json.loads(progress["sources"][0]["latestOffset"])
    status = latest.get("status") or {}
    return dict(status.get("skipped") or {})


def test_a_log_debezium_wrote_from_mariadb_lands_whole_once_and_folds_to_the_tables(
    spark: SparkSession,
    control: spark_ckpt.Control,
    mariadb_server: MariaDbServer,
    mariadb_database: str,
    tmp_path: Path,
) -> None:
    """Snapshot, workload, DDL, 3,000 rows, writer SIGKILL: each GTID whole once; mirrors exact."""
    server, database = mariadb_server, mariadb_database
    create_schema(server, database)
    writer = writer_for(server, database, tmp_path).start()
    table = tmp_path / "table"
    committed: dict[str, str] = {}
    supervised = None
    try:
        # Ready means the task runs, not that the snapshot is read: transactions committed
        # before its binlog position would be snapshot rows, not streamed transactions.
        wait_until(lambda: snapshot_published(writer), 60, "Debezium did not publish a snapshot")
        supervised = control.supervise(
            lambda: query(spark, tmp_path / "log", table),
            checkpoint_location=str(tmp_path / "ckpt"),
            name="dbz-mariadb",
        )
        first = Workload(server, database, "first", 60, seed=1, alter_at=5, pause=0.03).start()
        # Killed before its offsets pass the snapshot, Debezium would take it again.
        writer.wait_offsets_past_snapshot(120)
        published = writer.published_records()
        large = large_transaction(server, database, 3000)
        committed[large] = "large"
        # Killed while the workload runs and, most likely, while the 3,000-row transaction is
        # published in part: offsets only cover whole transactions, so Debezium writes it again
        # from its BEGIN, and the workload's transactions before it too.
        writer.wait_for_records(published + 1200, 60)
        writer.kill()
        while_down = Workload(server, database, "down", 15, seed=2).start()
        while_down.join(60)
        first.join(120)
        committed |= first.committed | while_down.committed
        writer.restart()
        second = Workload(server, database, "second", 40, seed=3).start()
        second.join(120)
        committed |= second.committed
        writer.wait_idle(2.0, 120)
        expected = {*committed, "snapshot"}

        wait_until(
            lambda: delta_txn_ids(table) >= expected,
            120,
            f"the Delta table did not catch up with {len(expected)} units",
        )
        skipped = skipped_of(supervised.query)
    finally:
        if supervised is not None:
            supervised.stop(drain=True)
        writer.close()

    # Every transaction in exactly one Delta version, whole, once; the snapshot too.
    rows = delta_changes(table)
    by_txn = whole_once(rows)
    snapshot = by_txn.pop("snapshot")
    assert {r["op"] for r in snapshot} == {"r"}
    assert Counter(r["table"] for r in snapshot) == {
        f"{database}.accounts": ACCOUNTS,
        f"{database}.txlog": 1,
    }
    # Exactly the committed GTIDs were streamed, each holding the txlog row it wrote.
    assert sorted(by_txn) == sorted(committed), "a committed transaction is missing or extra"
    logged = {
        txn_id: [json.loads(r["after"])["id"] for r in txn_rows if r["table"].endswith(".txlog")]
        for txn_id, txn_rows in by_txn.items()
    }
    assert logged == {gtid: [txlog] for gtid, txlog in committed.items()}
    assert len(by_txn[large]) == 3000, "the large transaction was not whole"

    # Debezium's repeats after the SIGKILL were dropped, each counted once.
    repeated, repeated_ends = repeated_changes(writer)
    assert skipped.get("repeats") == repeated, (
        f"the log repeats {repeated} change events ({repeated_ends} ENDs), but the source "
        f"reports skipping {skipped}"
    )

    # The change log folded by key equals each table, row for row.
    assert_folds_to_tables(rows, server, database)

    # Mirror mode's tables equal the source tables, row for row, values exact.
    keys = {f"{database}.{name}": columns for name, columns in KEYS.items()}
    mirror_log(spark, control, tmp_path / "log", tmp_path / "mirror", tmp_path / "m", keys)
    mirrors = delta_mirrors(tmp_path / "mirror")
    assert sorted(mirrors) == sorted(keys)
    with server.connect(database) as conn, conn.cursor() as cursor:
        for name in KEYS:
            mirror = mirrors[f"{database}.{name}"]
            cursor.execute(f"SELECT * FROM {name}")
            columns = [d[0] for d in cursor.description or ()]
            assert sorted(mirror.column_names) == sorted(columns), f"the mirror of {name}"
            for column in columns:
                kind = str(mirror.schema.field(column).type)
                assert kind == MIRROR_TYPES.get(column, kind), f"{name}.{column} is {kind}"
            source = sorted(
                tuple(exact(c, v) for c, v in zip(columns, row, strict=True))
                for row in cursor.fetchall()
            )
            mirrored = sorted(
                tuple(mirrored_value(c, row[c]) for c in columns) for row in mirror.to_pylist()
            )
            assert mirrored == source, f"the mirror of {name} differs from the table"
