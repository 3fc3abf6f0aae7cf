"""Mirror mode on a real query: a growing Debezium log of shop transactions into mirror tables.

A producer thread appends shop transactions (orders and their items, changed together so that
every order's total is the sum of its items) while a ``delta-2pc`` query in ``mode=mirror`` runs.
A reader thread checks the invariant on ``spark_ckpt.read_consistent`` all along, and also on a
naive read of each table's latest version, one table after the other. At the end each mirror
equals the workload's state, read back through delta-spark.
"""

from __future__ import annotations

import os
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import schema_migrations
from conftest import wait_until
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from pyspark.errors import StreamingQueryException

import spark_ckpt
from harness.delta_reads import read_delta
from spark_ckpt.errors import MirrorSchemaError, message_in_trace
from spark_ckpt.testing.debezium_log import write_log
from spark_ckpt.testing.shop_workload import (
    ITEMS,
    ORDERS,
    ShopChange,
    ShopWorkload,
    invariant_violations,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

pytestmark = pytest.mark.integration


class ShopProducer(threading.Thread):
    """Writes ``count`` shop transactions to ``log``, a few per file, every ``pause`` seconds."""

    def __init__(self, log: Path, workload: ShopWorkload, count: int, pause: float) -> None:
        super().__init__(name="shop-producer", daemon=True)
        self.log, self.workload, self.count, self.pause = log, workload, count, pause
        log.mkdir(parents=True, exist_ok=True)
        self.files = 0

    def run(self) -> None:
        written = 0
        while written < self.count:
            records: list[dict[str, Any]] = []
            for _ in range(min(3, self.count - written)):
                changes = self.workload.step()
                records += self.workload.debezium_records(
                    changes, f"shop-{written}", 1_700_000_000_000 + written * 1000
                )
                written += 1
            staging = self.log / ".staging"
            [path] = write_log(str(staging), records, [], first_file=self.files)
            os.replace(path, self.log / f"{self.files:08d}.jsonl")  # the file appears whole
            self.files += 1
            time.sleep(self.pause)


def _mirror_query(spark: SparkSession, log: Path, root: Path, ckpt: Path) -> StreamingQuery:
    """A streaming mirror-mode query whose publisher compacts every third batch's tables.

    Its write tasks find the stored rows each batch replaces, however small the mirrors
    (``executorMarksMinFiles=0``): while the listener publishes the batch before, and while
    compactions replace files.
    """
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", "25")
        .load(str(log))
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", str(root))
        .option("checkpointLocation", str(ckpt))
        .option("compactEvery", "3")
        .option("compactMinFiles", "3")
        .option("executorMarksMinFiles", "0")
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def _bounded_mirror_query(
    spark: SparkSession, log: Path, root: Path, ckpt: Path, cap: int = 10_000, scd: int = 1
) -> StreamingQuery:
    """An availableNow mirror-mode query over the log (batches of about ``cap`` changes)."""
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", str(cap))
        .load(str(log))
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("scd", str(scd))
        .option("path", str(root))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )


def _rows(frame: Any) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def _normalised(rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {
        tuple(sorted((k, str(v) if v is not None else None) for k, v in r.items())) for r in rows
    }


def test_mirror_tables_track_the_source_and_read_consistently(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    log, root, ckpt = tmp_path / "log", tmp_path / "shop", tmp_path / "ckpt"
    workload = ShopWorkload(seed=11)
    producer = ShopProducer(log, workload, count=90, pause=0.25)
    producer.start()
    wait_until(lambda: producer.files > 0, 30, "the producer wrote no file")
    query = _mirror_query(spark, log, root, ckpt)
    naive_checks, naive_failures, problems = 0, 0, []
    checked: set[int] = set()  # the index versions read consistently, with both mirrors in them
    done = threading.Event()

    def read_consistently() -> None:
        # One read per checkpoint published: a read through Spark (two time-travel snapshots and
        # their jobs) takes seconds on two busy cores; back to back, re-reading the same
        # checkpoint, it took the cores the query needed. A new index version is a new
        # checkpoint to read; the file listing that tells costs nothing.
        versions_read: set[int] = set()
        while not done.is_set():
            version = schema_migrations.published_version(root)
            if version < 0 or version in versions_read:
                done.wait(0.2)
                continue
            versions_read.add(version)
            try:
                tables = spark_ckpt.read_consistent(spark, str(root))
            except Exception as e:  # reported by the test, not lost with the thread
                problems.append(f"read_consistent raised {e!r}")
                return
            if ORDERS in tables and ITEMS in tables:
                problems.extend(invariant_violations(_rows(tables[ORDERS]), _rows(tables[ITEMS])))
                checked.add(version)

    def read_naively() -> None:
        # Each table's latest version, one after the other (as two SQL queries would).
        nonlocal naive_checks, naive_failures
        while not done.is_set():
            try:
                orders = read_delta(str(root / ORDERS)).to_pylist()
                time.sleep(0.1)
                items = read_delta(str(root / ITEMS)).to_pylist()
            except TableNotFoundError:
                time.sleep(0.2)
                continue
            naive_checks += 1
            naive_failures += bool(invariant_violations(orders, items))

    readers = [
        threading.Thread(target=read_consistently, name="consistent-reader", daemon=True),
        threading.Thread(target=read_naively, name="naive-reader", daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        producer.join(timeout=120)
        assert not producer.is_alive(), "the producer did not finish within 120 s"
        final_txn = len(workload.transactions)

        def caught_up() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            index = root / "_checkpoints"
            if not (index / "_delta_log").exists():
                return False
            try:
                changes = DeltaTable(str(root / "_changes")).to_pyarrow_table(columns=["txn_id"])
            except TableNotFoundError:
                return False  # its log directory is there before its first commit file is
            return len(set(changes.column("txn_id").to_pylist())) == final_txn

        wait_until(caught_up, 120, "the mirrors did not catch up with the log")
        # The reader reads the last checkpoint too, whatever it read while the query streamed.
        final = schema_migrations.published_version(root)
        wait_until(
            lambda: max(checked, default=-1) >= final or bool(problems),
            120,
            "the reader did not read the last checkpoint",
        )
    finally:
        done.set()
        for reader in readers:
            reader.join(timeout=60)
        query.stop()
    assert not problems, f"read_consistent broke the invariant: {problems[:5]}"
    # 90 transactions at maxChangesPerTrigger=25 publish a dozen or more checkpoints while the
    # reader reads; a read through a fresh JVM's Spark can take a minute on busy cores, so it
    # may check only one of them besides the last.
    assert len(checked) >= 2, f"the reader checked {sorted(checked)}: not while the query streamed"
    assert naive_failures >= 1, (
        f"the naive read never broke the invariant in {naive_checks} reads: the test did "
        f"not show why consistent reads exist"
    )
    tables = spark_ckpt.read_consistent(spark, str(root))
    for name in (ORDERS, ITEMS):
        latest = _rows(spark.read.format("delta").load(str(root / name)))
        assert _normalised(_rows(tables[name])) == _normalised(latest)
        expected = list(workload.rows[name].values())
        assert _normalised(latest) == _normalised(expected), name
    assert not invariant_violations(_rows(tables[ORDERS]), _rows(tables[ITEMS]))
    assert sum(Decimal(r["total"]) for r in workload.rows[ORDERS].values()) > 0
    # The publisher compacted the mirrors while the readers read them at every checkpoint.
    operations = [
        h["operation"] for n in (ORDERS, ITEMS) for h in DeltaTable(str(root / n)).history()
    ]
    assert "OPTIMIZE" in operations, operations
    by_tasks = [
        int(h.get("spark-ckpt.mirror.filesReadByTasks", 0))
        for n in (ORDERS, ITEMS)
        for h in DeltaTable(str(root / n)).history()
    ]
    assert sum(by_tasks) > 0, "the write tasks never found a batch's replaced rows"


def test_a_changed_column_type_stops_the_query_before_publishing(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    log, root, ckpt = tmp_path / "log", tmp_path / "shop", tmp_path / "ckpt"
    workload = ShopWorkload(seed=3)
    records = []
    for number in range(3):
        records += workload.debezium_records(workload.step(), f"t{number}", 1_700_000_000_000)
    write_log(str(log), records, [])
    query = _bounded_mirror_query(spark, log, root, ckpt)
    query.awaitTermination(120)
    # The listener publishes the last batch when the query ends; the checkpoint index is
    # written last (a mirror's log directory exists before its first commit does).
    wait_until(
        lambda: schema_migrations.published_version(root) >= 0, 30, "the mirror was not published"
    )
    before = DeltaTable(str(root / ORDERS)).version()
    # The same column now arrives as a number: a different type than the mirror's string.
    order = dict(next(iter(workload.rows[ORDERS].values())))
    bad = {**order, "total": 12.5}
    event = workload.debezium_records([ShopChange(ORDERS, "u", order, bad)], "bad", 1)
    write_log(str(log), event, [], first_file=1)
    query = _bounded_mirror_query(spark, log, root, ckpt)
    with pytest.raises(StreamingQueryException) as failure:
        query.awaitTermination(120)
    message = message_in_trace(str(failure.value), MirrorSchemaError)
    assert message is not None, str(failure.value)[-2000:]
    assert "column 'total'" in message
    assert DeltaTable(str(root / ORDERS)).version() == before


# The quick tier's mirror test (the one above races readers against a producer for a minute).
@pytest.mark.quick
def test_scd2_mirrors_keep_every_version_and_the_current_rows_equal_the_source(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    log, root, ckpt = tmp_path / "log", tmp_path / "shop", tmp_path / "ckpt"
    workload = ShopWorkload(seed=8)
    records: list[dict[str, Any]] = []
    for number in range(40):
        records += workload.debezium_records(workload.step(), f"t{number}", number * 1000)
    write_log(str(log), records, [len(records) // 3, 2 * len(records) // 3])
    query = _bounded_mirror_query(spark, log, root, ckpt, cap=20, scd=2)
    assert control.await_termination(query, 300)
    tables = spark_ckpt.read_consistent(spark, str(root))
    for name in (ORDERS, ITEMS):
        frame = tables[name]
        assert {"__start_at", "__end_at"} <= set(frame.columns)
        current = _rows(frame.where("__end_at IS NULL").drop("__start_at", "__end_at"))
        assert _normalised(current) == _normalised(list(workload.rows[name].values())), name
    # Every order's total was rewritten at least once: its history has more than one version.
    versions = tables[ORDERS].groupBy("id").count().where("count > 1").count()
    assert versions > 0
    overlapping = (
        tables[ITEMS]
        .alias("a")
        .join(
            tables[ITEMS].alias("b"),
            "id",
        )
        .where("a.__start_at < b.__start_at AND (a.__end_at IS NULL OR a.__end_at > b.__start_at)")
    )
    assert overlapping.count() == 0, "two versions of one item were valid at the same time"


@pytest.mark.parametrize("log_files", [[], ["_commit_0f1e.json.tmp"]])
def test_read_consistent_before_the_first_publish_says_nothing_is_published(
    spark: SparkSession, tmp_path: Path, log_files: list[str]
) -> None:
    # The index's first commit being written: `_delta_log` exists, version 0 not yet (delta-rs
    # writes a temporary file and renames it). delta-spark says DELTA_TABLE_NOT_FOUND there.
    delta_log = tmp_path / "shop" / "_checkpoints" / "_delta_log"
    delta_log.mkdir(parents=True)
    for name in log_files:
        (delta_log / name).write_text("{}")
    with pytest.raises(spark_ckpt.UsageError, match="no batch has been published yet"):
        spark_ckpt.read_consistent(spark, str(tmp_path / "shop"))
