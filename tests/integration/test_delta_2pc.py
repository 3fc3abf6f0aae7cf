"""delta-2pc in real streaming queries, read back with delta-spark."""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import wait_until
from deltalake import DeltaTable
from pyspark.errors import StreamingQueryException
from pyspark.testing import assertDataFrameEqual

import spark_ckpt
from harness.delta_reads import count_delta
from spark_ckpt.sinks.staging import parse_staged_name
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.testing.debezium_log import GeneratedTxn, random_log, write_log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def changes(spark: SparkSession, log: Path, cap: int) -> DataFrame:
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", str(cap))
        .load(str(log))
    )


def write_2pc(frame: DataFrame, table: Path, checkpoint: Path, **options: str) -> Any:
    """Start a bounded (availableNow) query writing ``frame`` with delta-2pc."""
    writer = (
        frame.writeStream.format("delta-2pc")
        .option("path", str(table))
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.trigger(availableNow=True).start()


def generated(tmp_path: Path, seed: int, transactions: int) -> tuple[Path, list[GeneratedTxn]]:
    rng = random.Random(seed)
    records, expected = random_log(rng, transactions, max_size=12, interleave=4)
    log = tmp_path / "log"
    write_log(str(log), records, sorted(rng.sample(range(len(records)), 3)))
    return log, expected


def notes_of(frame: DataFrame) -> list[str]:
    rows = frame.orderBy("txn_order", "event_index").select("after").collect()
    return [json.loads(row.after)["note"] for row in rows]


def expected_notes(expected: list[GeneratedTxn]) -> list[str]:
    return [event["after"]["note"] for txn in expected for event in txn.events]


def committed_batches(checkpoint: Path) -> list[int]:
    return SparkCheckpoint(str(checkpoint)).committed_batches()


@pytest.mark.quick
def test_bounded_run_is_fully_visible_when_it_ends(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """AvailableNow into delta-2pc: after await_termination every batch is a Delta version."""
    log, expected = generated(tmp_path, 1, 50)
    table, checkpoint = tmp_path / "table", tmp_path / "ckpt"
    query = write_2pc(changes(spark, log, 60), table, checkpoint)
    assert control.await_termination(query, 180), "the bounded run did not finish"
    written = spark.read.format("delta").load(str(table))
    assert notes_of(written) == expected_notes(expected)
    batches = committed_batches(checkpoint)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    assert len(history) == len(batches), "one Delta commit per batch"
    query_id = SparkCheckpoint(str(checkpoint)).query_id()
    assert DeltaTable(str(table)).transaction_version(query_id) == batches[-1]


def test_every_delta_version_adds_whole_transactions(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """Reading version by version, no source transaction is ever visible in part."""
    log, _ = generated(tmp_path, 2, 40)
    table = tmp_path / "table"
    query = write_2pc(changes(spark, log, 60), table, tmp_path / "ckpt")
    assert control.await_termination(query, 180)
    versions = len(spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect())
    assert versions > 2
    for version in range(versions):
        snapshot = spark.read.format("delta").option("versionAsOf", version).load(str(table))
        counts: dict[tuple[str, int], int] = defaultdict(int)
        for row in snapshot.select("txn_id", "txn_size").collect():
            counts[(row.txn_id, row.txn_size)] += 1
        torn = {k: v for k, v in counts.items() if v != k[1]}
        assert not torn, f"version {version} shows transactions in part: {torn}"


def test_table_matches_the_source_rows_exactly(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """The Delta table equals what txn-cdc produced, row for row and type for type."""
    log, _ = generated(tmp_path, 3, 40)
    table = tmp_path / "table"
    query = write_2pc(changes(spark, log, 1000), table, tmp_path / "ckpt", partitionBy="table")
    assert control.await_termination(query, 180)
    collected: list[Any] = []
    probe = changes(spark, log, 1000).writeStream.foreachBatch(
        lambda frame, _: collected.extend(frame.collect())
    )
    probe_query = (
        probe.option("checkpointLocation", str(tmp_path / "ckpt-probe"))
        .trigger(availableNow=True)
        .start()
    )
    assert probe_query.awaitTermination(180)
    source = spark.createDataFrame(collected, schema=changes(spark, log, 1).schema)
    written = spark.read.format("delta").load(str(table))
    assertDataFrameEqual(written.select(*source.columns), source)
    assert sorted(os.listdir(table)) == sorted(
        ["_delta_log", *{f"table={row.table}" for row in collected}]
    )


def test_stop_and_restart_publishes_everything_once(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """A query stopped mid-stream and restarted on its checkpoint loses and duplicates nothing."""
    log, expected = generated(tmp_path, 4, 60)
    table, checkpoint = tmp_path / "table", tmp_path / "ckpt"

    def start() -> Any:
        return (
            changes(spark, log, 20)
            .writeStream.format("delta-2pc")
            .option("path", str(table))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="50 milliseconds")
            .start()
        )

    first = start()
    wait_until(lambda: len(committed_batches(checkpoint)) >= 4, 120, "no progress before stop")
    first.stop()
    assert first.awaitTermination(60)
    second = start()
    try:
        wait_until(
            lambda: count_delta(str(table)) >= len(expected_notes(expected)),
            180,
            "the restarted query did not publish the whole log",
        )
        second.processAllAvailable()
    finally:
        second.stop()
    assert control.listener.finished(str(second.runId)).wait(60)
    assert notes_of(spark.read.format("delta").load(str(table))) == expected_notes(expected)


def test_appends_to_a_table_made_by_delta_spark(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """An existing delta-spark table with the same schema is appended to."""
    log, expected = generated(tmp_path, 5, 20)
    table = tmp_path / "table"
    schema = changes(spark, log, 1).schema
    spark.createDataFrame([], schema).write.format("delta").save(str(table))
    query = write_2pc(changes(spark, log, 1000), table, tmp_path / "ckpt")
    assert control.await_termination(query, 180)
    assert notes_of(spark.read.format("delta").load(str(table))) == expected_notes(expected)


def own_staged_files(table: Path) -> list[str]:
    return [
        name
        for _, _, names in os.walk(table)
        for name in names
        if parse_staged_name(name) is not None
    ]


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        (
            "CREATE TABLE delta.`{table}` (source STRING, txn_id STRING) USING delta "
            "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
            "deletion vectors",
        ),
        (
            "CREATE TABLE delta.`{table}` (source STRING, txn_id STRING) USING delta "
            "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')",
            "column mapping",
        ),
        (
            "CREATE TABLE delta.`{table}` (source STRING, txn_id BIGINT) USING delta",
            "does not fit",
        ),
        (
            "CREATE TABLE delta.`{table}` (source STRING NOT NULL, txn_id STRING) USING delta",
            "is NOT NULL in the table but nullable in the stream",
        ),
        (
            "CREATE TABLE delta.`{table}` (source STRING, txn_id STRING) USING delta;"
            "ALTER TABLE delta.`{table}` ADD CONSTRAINT known CHECK (source <> 'x')",
            "CHECK constraint(s) known",
        ),
        (
            "CREATE TABLE delta.`{table}` (source STRING, txn_id STRING, "
            "n INT GENERATED ALWAYS AS (length(source))) USING delta",
            "a generated column ('n')",
        ),
    ],
    ids=["deletion-vectors", "column-mapping", "type", "not-null", "check", "generated"],
)
def test_unwritable_table_is_refused_before_anything_is_staged(
    spark: SparkSession, tmp_path: Path, prepare: str, message: str
) -> None:
    """Table features, rules delta-rs would bypass, or a schema mismatch stop the query early."""
    log, _ = generated(tmp_path, 6, 10)
    table = tmp_path / "table"
    for statement in prepare.split(";"):
        spark.sql(statement.format(table=table))
    version = DeltaTable(str(table)).version()
    query = write_2pc(changes(spark, log, 1000), table, tmp_path / "ckpt")
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(120)
    assert "TableIncompatibleError" in str(info.value)
    assert message in str(info.value)
    assert own_staged_files(table) == []
    assert DeltaTable(str(table)).version() == version, "nothing is published"


def test_missing_checkpoint_location_is_a_clear_error(spark: SparkSession, tmp_path: Path) -> None:
    """Without checkpointLocation as a writer option, the sink says what to add."""
    log, _ = generated(tmp_path, 7, 5)
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "root"))
    try:
        query = (
            changes(spark, log, 10)
            .writeStream.format("delta-2pc")
            .option("path", str(tmp_path / "table"))
            .trigger(availableNow=True)
            .start()
        )
        with pytest.raises(StreamingQueryException, match="checkpointLocation"):
            query.awaitTermination(120)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")


def test_delta_spark_reads_the_table_after_a_delta_rs_checkpoint(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """Checkpoints written by delta-rs (the sink's commits) are readable by delta-spark."""
    log, expected = generated(tmp_path, 8, 30)
    table = tmp_path / "table"
    query = write_2pc(changes(spark, log, 50), table, tmp_path / "ckpt")
    assert control.await_termination(query, 180)
    DeltaTable(str(table)).create_checkpoint()
    assert any(name.endswith(".checkpoint.parquet") for name in os.listdir(table / "_delta_log"))
    spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # type: ignore[union-attr]
    assert notes_of(spark.read.format("delta").load(str(table))) == expected_notes(expected)


def test_timestamp_without_time_zone_round_trips_through_delta_spark(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """A TIMESTAMP_NTZ column written by delta-rs gets a protocol delta-spark accepts."""
    log, _ = generated(tmp_path, 9, 10)
    table = tmp_path / "table"
    frame = changes(spark, log, 1000).selectExpr(
        "txn_id", "event_index", "CAST(commit_ts AS TIMESTAMP_NTZ) AS local_ts", "commit_ts"
    )
    query = write_2pc(frame, table, tmp_path / "ckpt")
    assert control.await_termination(query, 180)
    written = spark.read.format("delta").load(str(table))
    assert dict(written.dtypes)["local_ts"] == "timestamp_ntz"
    mismatched = written.filter("CAST(local_ts AS TIMESTAMP) != commit_ts").count()
    assert written.count() > 0
    assert mismatched == 0


def test_merge_schema_adds_the_streams_new_columns(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """With mergeSchema, new columns are added to the table and their values are visible."""
    log, expected = generated(tmp_path, 10, 10)
    table = tmp_path / "table"
    spark.sql(f"CREATE TABLE delta.`{table}` (txn_id STRING, after STRING) USING delta")
    frame = changes(spark, log, 1000).select("txn_id", "after", "txn_order", "event_index")

    refused = write_2pc(frame, table, tmp_path / "ckpt-refused", mergeSchema="false")
    with pytest.raises(StreamingQueryException, match="new column 'txn_order'"):
        refused.awaitTermination(120)
    merged = write_2pc(frame, table, tmp_path / "ckpt", mergeSchema="true")
    assert control.await_termination(merged, 180)
    written = spark.read.format("delta").load(str(table))
    assert written.columns == ["txn_id", "after", "txn_order", "event_index"]
    assert notes_of(written) == expected_notes(expected)
