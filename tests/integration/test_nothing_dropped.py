"""Nothing is dropped silently: data behind the reader, and output modes delta-2pc cannot honour.

Each test runs a real streaming query (txn-cdc -> delta-2pc, published by the control plane's
listener) and reads the Delta table back with delta-spark. A query either delivers every
transaction or stops with a typed error; it never stays healthy while the table misses data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import wait_until
from pyspark.errors import StreamingQueryException

import spark_ckpt

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

TIMEOUT = 120


def txn_lines(txn_id: str, size: int = 2) -> str:
    events = [
        {
            "op": "c",
            "before": None,
            "after": {"txn": txn_id, "n": i},
            "source": {"schema": "public", "table": "orders", "ts_ms": 1_700_000_000_000},
            "transaction": {"id": txn_id, "total_order": i + 1, "data_collection_order": i + 1},
        }
        for i in range(size)
    ]
    records = [
        {"status": "BEGIN", "id": txn_id},
        *events,
        {"status": "END", "id": txn_id, "event_count": size},
    ]
    return "".join(json.dumps(r) + "\n" for r in records)


def start_stream(spark: SparkSession, tmp_path: Path, **source_options: str) -> StreamingQuery:
    """A continuously triggered txn-cdc -> delta-2pc query over ``tmp_path/log``."""
    reader = spark.readStream.format("txn-cdc").option("connector", "debezium-json")
    for key, value in source_options.items():
        reader = reader.option(key, value)
    return (
        reader.load(str(tmp_path / "log"))
        .writeStream.format("delta-2pc")
        .option("path", str(tmp_path / "table"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def published_txns(spark: SparkSession, table: Path) -> list[str]:
    """Transaction ids in the table, one per transaction, in txn_order (delta-spark)."""
    if not (table / "_delta_log").exists():
        return []
    rows = spark.read.format("delta").load(str(table)).select("txn_id", "txn_order").collect()
    return [txn for _, txn in sorted({(r.txn_order, r.txn_id) for r in rows})]


def wait_published(spark: SparkSession, table: Path, expected: list[str]) -> None:
    wait_until(
        lambda: published_txns(spark, table) == expected,
        TIMEOUT,
        f"the table to hold exactly {expected} (it holds {published_txns(spark, table)})",
    )


def failure_of(query: StreamingQuery) -> str:
    """Wait (bounded) for the query to stop with an error; return the error's text."""
    try:
        finished = query.awaitTermination(TIMEOUT)
    except StreamingQueryException as e:
        return str(e)
    query.stop()
    state = "finished without an error" if finished else f"still running after {TIMEOUT}s"
    raise AssertionError(f"the query should have stopped with a typed error, but it {state}")


def test_a_file_sorting_before_read_files_stops_the_query(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """b10.jsonl after b9.jsonl was read (name order): LogOrderError names it; nothing is lost."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "b9.jsonl").write_text(txn_lines("tx-9"))
    query = start_stream(spark, tmp_path)
    try:
        wait_published(spark, tmp_path / "table", ["tx-9"])
        (log / "b10.jsonl").write_text(txn_lines("tx-10"))
        error = failure_of(query)
    finally:
        query.stop()
    assert "LogOrderError" in error
    assert "'b10.jsonl'" in error
    assert "fileOrder=natural" in error
    assert published_txns(spark, tmp_path / "table") == ["tx-9"]


def test_natural_order_delivers_unpadded_file_numbers(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """With fileOrder=natural, b9, b10, b11 arriving one by one are delivered in that order."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "b9.jsonl").write_text(txn_lines("tx-9"))
    query = start_stream(spark, tmp_path, fileOrder="natural")
    try:
        wait_published(spark, tmp_path / "table", ["tx-9"])
        (log / "b10.jsonl").write_text(txn_lines("tx-10"))
        wait_published(spark, tmp_path / "table", ["tx-9", "tx-10"])
        (log / "b11.jsonl").write_text(txn_lines("tx-11"))
        wait_published(spark, tmp_path / "table", ["tx-9", "tx-10", "tx-11"])
        assert query.isActive
        assert query.exception() is None
    finally:
        query.stop()
    rows = spark.read.format("delta").load(str(tmp_path / "table")).count()
    assert rows == 6  # every change once


def test_lines_appended_to_an_older_file_stop_the_query(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """An append to a file the reader has moved past: LogRewrittenError names the file."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "0001.jsonl").write_text(txn_lines("tx-1"))
    (log / "0002.jsonl").write_text(txn_lines("tx-2"))
    query = start_stream(spark, tmp_path)
    try:
        wait_published(spark, tmp_path / "table", ["tx-1", "tx-2"])
        with (log / "0001.jsonl").open("a") as handle:
            handle.write(txn_lines("tx-late"))
        error = failure_of(query)
    finally:
        query.stop()
    assert "LogRewrittenError" in error
    assert "0001.jsonl" in error
    assert "grew from" in error
    assert published_txns(spark, tmp_path / "table") == ["tx-1", "tx-2"]


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("complete", "UnsupportedOutputModeError"),
        # Spark refuses update mode for every Python sink before the sink is built.
        ("update", "does not support Update mode"),
    ],
)
def test_output_modes_other_than_append_are_refused_before_anything_is_written(
    spark: SparkSession, tmp_path: Path, mode: str, error: str
) -> None:
    """complete/update stop the query at its first batch; no table, no staged file."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "0001.jsonl").write_text(txn_lines("tx-1"))
    counts: Any = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .load(str(log))
        .groupBy("table")
        .count()
    )
    query = (
        counts.writeStream.format("delta-2pc")
        .outputMode(mode)
        .option("path", str(tmp_path / "table"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    message = failure_of(query)
    assert error in message
    assert not (tmp_path / "table").exists() or not any((tmp_path / "table").rglob("*.parquet"))
    assert not (tmp_path / "table" / "_delta_log").exists()
