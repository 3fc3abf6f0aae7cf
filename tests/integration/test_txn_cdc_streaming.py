"""txn-cdc in real streaming queries: growing logs, restarts, availableNow, bad input."""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import wait_until
from pyspark.errors import StreamingQueryException

from spark_ckpt.sources.schema import SPARK_DDL
from spark_ckpt.testing.debezium_log import GeneratedTxn, random_log, write_log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery


class BatchCollector:
    """foreachBatch target: keeps each batch's rows by batch id (runs on the driver)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: dict[int, list[list[dict[str, Any]]]] = defaultdict(list)

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        rows = [row.asDict() for row in frame.orderBy("txn_order", "event_index").collect()]
        with self.lock:
            self.batches[batch_id].append(rows)

    def final_rows(self) -> list[dict[str, Any]]:
        """Rows of every batch id once (the last run of a re-run batch), in batch order."""
        with self.lock:
            return [row for bid in sorted(self.batches) for row in self.batches[bid][-1]]

    def row_count(self) -> int:
        return len(self.final_rows())


def stream(spark: SparkSession, path: Path, **options: str) -> DataFrame:
    reader = spark.readStream.format("txn-cdc").option("connector", "debezium-json")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(path))


def notes(rows: list[dict[str, Any]]) -> list[str]:
    return [json.loads(row["after"])["note"] for row in rows]


def expected_notes(expected: list[GeneratedTxn]) -> list[str]:
    return [event["after"]["note"] for txn in expected for event in txn.events]


def assert_whole_transactions(batches: dict[int, list[list[dict[str, Any]]]]) -> None:
    for batch_id, runs in batches.items():
        for rows in runs:
            counts: dict[tuple[str, int], int] = defaultdict(int)
            for row in rows:
                counts[(row["txn_id"], row["txn_size"])] += 1
            for (txn_id, size), count in counts.items():
                assert count == size, f"batch {batch_id} holds {count} of {size} rows of {txn_id}"


def start(
    frame: DataFrame, collector: BatchCollector, checkpoint: Path, **trigger: Any
) -> StreamingQuery:
    writer = frame.writeStream.foreachBatch(collector).option("checkpointLocation", str(checkpoint))
    return writer.trigger(**(trigger or {"processingTime": "100 milliseconds"})).start()


def test_schema_is_the_documented_change_schema(spark: SparkSession, tmp_path: Path) -> None:
    """Every connector produces the common schema of DESIGN.md §2."""
    (tmp_path / "log").mkdir()
    frame = stream(spark, tmp_path / "log")
    assert frame.isStreaming
    assert frame.schema.simpleString() == spark.createDataFrame([], SPARK_DDL).schema.simpleString()
    assert frame.columns == [
        "source",
        "txn_id",
        "txn_order",
        "txn_size",
        "event_index",
        "commit_ts",
        "table",
        "op",
        "key",
        "before",
        "after",
    ]


def test_growing_directory_never_emits_a_partial_transaction(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Files grow and appear while the query runs; every batch holds whole transactions."""
    rng = random.Random(7)
    records, expected = random_log(rng, 120, max_size=15, interleave=5, end_before_events=0.3)
    log = tmp_path / "log"
    log.mkdir()
    collector = BatchCollector()
    query = start(stream(spark, log, maxChangesPerTrigger="40"), collector, tmp_path / "ckpt")
    try:
        # Deliver the log in three steps: a first file, then more lines appended to that same
        # file (it grows), then a new file that starts with the END of a transaction whose
        # change events all came earlier (its END arrives in a later file).
        split_end = next(
            i
            for i, r in enumerate(records)
            if r.get("status") == "END"
            and i > len(records) // 2
            and all(
                records.index(event) < i
                for txn in expected
                if txn.txn_id == r["id"]
                for event in txn.events
            )
        )
        third = len(records) // 3
        write_log(str(log), records[:third], [])
        query.processAllAvailable()
        with (log / "00000000.jsonl").open("a") as handle:
            handle.write("".join(json.dumps(r) + "\n" for r in records[third:split_end]))
        query.processAllAvailable()
        write_log(str(log), records[split_end:], [], first_file=1)
        query.processAllAvailable()
        wait_until(
            lambda: collector.row_count() >= len(expected_notes(expected)),
            120,
            "the query did not deliver every complete transaction",
        )
    finally:
        query.stop()
    assert_whole_transactions(collector.batches)
    assert notes(collector.final_rows()) == expected_notes(expected)
    assert len(collector.batches) > 3


@pytest.mark.quick
def test_stop_and_restart_loses_and_duplicates_nothing(spark: SparkSession, tmp_path: Path) -> None:
    """Stopping mid-stream and restarting on the same checkpoint is exact; re-runs replay."""
    rng = random.Random(11)
    records, expected = random_log(rng, 150, max_size=12, interleave=4)
    log = tmp_path / "log"
    write_log(str(log), records, sorted(rng.sample(range(len(records)), 6)))
    collector = BatchCollector()
    checkpoint = tmp_path / "ckpt"
    frame = stream(spark, log, maxChangesPerTrigger="25")
    first = start(frame, collector, checkpoint)
    wait_until(lambda: len(collector.batches) >= 5, 120, "the first run made no progress")
    first.stop()
    done_first = len(collector.batches)
    assert collector.row_count() < len(expected_notes(expected)), "first run read everything"
    # A larger limit after the restart (as a user may set): the batch the stop cut short runs
    # again with its logged offsets, the rest of the log in fewer batches.
    second = start(stream(spark, log, maxChangesPerTrigger="100"), collector, checkpoint)
    try:
        wait_until(
            lambda: collector.row_count() >= len(expected_notes(expected)),
            240,
            "the restarted query did not finish the log",
        )
        second.processAllAvailable()
    finally:
        second.stop()
    assert len(collector.batches) > done_first
    for batch_id, runs in collector.batches.items():
        assert all(run == runs[0] for run in runs), f"batch {batch_id} re-ran with other rows"
    assert_whole_transactions(collector.batches)
    assert notes(collector.final_rows()) == expected_notes(expected)


def test_available_now_reads_complete_transactions_and_stops(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Trigger.availableNow delivers every complete transaction, then the query ends."""
    rng = random.Random(3)
    records, expected = random_log(rng, 60, max_size=8, interleave=3)
    log = tmp_path / "log"
    write_log(str(log), records, [len(records) // 2])
    # A transaction whose END never arrives must not appear.
    write_log(
        str(log),
        [
            {"status": "BEGIN", "id": "open-1"},
            {**expected[0].events[0], "transaction": {"id": "open-1", "total_order": 1}},
        ],
        [],
        first_file=5,
    )
    collector = BatchCollector()
    frame = stream(spark, log, maxChangesPerTrigger="30")
    query = start(frame, collector, tmp_path / "ckpt", availableNow=True)
    assert query.awaitTermination(120), "availableNow query did not finish"
    assert query.exception() is None
    assert notes(collector.final_rows()) == expected_notes(expected)
    assert_whole_transactions(collector.batches)


def test_bad_line_fails_the_query_naming_file_and_line(spark: SparkSession, tmp_path: Path) -> None:
    """A malformed line stops the query with a typed error that names its file and line."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "0001.jsonl").write_text('{"status": "BEGIN", "id": "a"}\n{oops\n')
    query = start(stream(spark, log), BatchCollector(), tmp_path / "ckpt")
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(120)
    message = str(info.value)
    assert "MalformedEventError" in message
    assert "0001.jsonl:2: not valid JSON" in message


def test_unknown_option_fails_before_the_first_batch(spark: SparkSession, tmp_path: Path) -> None:
    """A typo in an option is reported with the known options."""
    (tmp_path / "log").mkdir()
    query = start(
        stream(spark, tmp_path / "log", maxChangesPerTriger="5"),
        BatchCollector(),
        tmp_path / "ckpt",
    )
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(120)
    assert "does not know the option 'maxchangespertriger'" in str(info.value)
    assert "maxChangesPerTrigger" in str(info.value)
