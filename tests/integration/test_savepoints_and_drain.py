"""Savepoints and drain on real queries: txn-cdc over a growing Debezium log into delta-2pc.

A producer thread keeps adding one transaction per file (each file appears whole, by rename)
while a supervised query runs. The query takes a savepoint while data keeps arriving, is stopped
with a draining savepoint, and is restored into a new checkpoint location and a relocated copy of
its table; an older savepoint is refused for the table that moved past it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import wait_until
from deltalake import DeltaTable

import spark_ckpt
from spark_ckpt.errors import SavepointRestoreError
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.testing.debezium_log import random_log
from spark_ckpt.testing.debezium_log import write_log as _write_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter


class Producer(threading.Thread):
    """Adds ``count`` transactions to ``log``, one file each, every ``pause`` seconds."""

    def __init__(self, log: Path, count: int, pause: float) -> None:
        super().__init__(name="debezium-producer", daemon=True)
        self.log, self.count, self.pause = log, count, pause
        self.sizes: dict[str, int] = {}
        self.written_at: dict[str, float] = {}
        self.stopped = threading.Event()
        log.mkdir(parents=True, exist_ok=True)

    def run(self) -> None:
        rng = random.Random(7)
        for number in range(self.count):
            if self.stopped.is_set():
                return
            records, [txn] = random_log(
                rng,
                1,
                max_size=4,
                interleave=1,
                non_transactional=0.0,
                end_before_events=0.0,
                id_prefix=f"w{number:04d}",
                first_ts_ms=1_700_000_000_000 + number * 1000,
            )
            staging = self.log / ".staging"
            [written] = _write_log(str(staging), records, [], first_file=number)
            os.replace(written, self.log / f"{number:08d}.jsonl")  # the file appears whole
            self.written_at[txn.txn_id] = time.time()
            self.sizes[txn.txn_id] = len(txn.events)
            time.sleep(self.pause)


def query_builder(
    spark: SparkSession, log: Path, table: Path, *, bounded: bool = False
) -> Callable[[], DataStreamWriter]:
    def build() -> DataStreamWriter:
        frame = (
            spark.readStream.format("txn-cdc")
            .option("connector", "debezium-json")
            .option("maxChangesPerTrigger", "12")
            .load(str(log))
        )
        writer = frame.writeStream.format("delta-2pc").option("path", str(table))
        if bounded:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime="700 milliseconds")

    return build


def txn_events(spark: SparkSession, table: Path) -> Counter[str]:
    rows = spark.read.format("delta").load(str(table)).select("txn_id").collect()
    return Counter(row.txn_id for row in rows)


def published(checkpoint: Path) -> list[int]:
    """The batches the history says were published."""
    records = HistoryLog(SparkCheckpoint(str(checkpoint))).records()
    return [r.checkpoint_id for r in records if r.delta_version is not None]


def assert_whole_and_once(found: Counter[str], sizes: dict[str, int]) -> None:
    for txn_id, events in found.items():
        assert events == sizes[txn_id], f"{txn_id}: {events} of {sizes[txn_id]} events"


@pytest.mark.quick
def test_savepoint_drain_and_relocated_restore(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    log, table, saved = tmp_path / "log", tmp_path / "table", tmp_path / "savepoints"
    producer = Producer(log, count=90, pause=0.1)
    producer.start()
    try:
        query = control.supervise(
            query_builder(spark, log, table),
            checkpoint_location=str(tmp_path / "ckpt"),
            name="savepoints",
        )
        ckpt = tmp_path / "ckpt"
        wait_until(lambda: len(published(ckpt)) >= 2, 240, "two batches published")
        early = query.savepoint(str(saved))  # while data keeps arriving
        wait_until(
            lambda: max(published(ckpt)) > early.checkpoint_id,
            240,
            "a batch published after the first savepoint",
        )
        called_at = time.time()
        before = {t for t, at in list(producer.written_at.items()) if at < called_at}
        final = query.stop_with_savepoint(str(saved), drain=True, timeout=240)
    finally:
        producer.stopped.set()
        producer.join(60)

    # Drain: everything written before the call is published; nothing after the end was fixed.
    fixed_at = query.drain_fixed_at
    assert fixed_at is not None
    assert fixed_at >= called_at
    drained = txn_events(spark, table)
    assert before <= set(drained), f"unpublished: {sorted(before - set(drained))[:5]}"
    late = [t for t in drained if producer.written_at[t] > fixed_at]
    assert not late, f"read after the drain fixed its end: {late[:5]}"
    assert_whole_and_once(drained, producer.sizes)
    checkpoint = SparkCheckpoint(str(tmp_path / "ckpt"))
    assert final.checkpoint_id == checkpoint.latest_committed(), "at the query's last batch"
    assert DeltaTable(str(table)).transaction_version(checkpoint.query_id()) == final.checkpoint_id

    # The older savepoint is refused for the table that moved past it; nothing is published.
    version = DeltaTable(str(table)).version()
    with pytest.raises(SavepointRestoreError, match="restore into a new table"):
        control.supervise(
            query_builder(spark, log, table, bounded=True),
            checkpoint_location=str(tmp_path / "refused"),
            name="refused",
            restore_from=early,
        )
    assert not (tmp_path / "refused").exists()
    assert DeltaTable(str(table)).version() == version

    # The final savepoint, moved, restored into a new location and a relocated copy of the table.
    moved = tmp_path / "moved-savepoint"
    shutil.move(final.location, moved)
    copy = tmp_path / "relocated"
    shutil.copytree(table, copy)
    restored = control.supervise(
        query_builder(spark, log, copy, bounded=True),
        checkpoint_location=str(tmp_path / "ckpt2"),
        name="restored",
        restore_from=str(moved),
        path_mapping={str(table): str(copy)},
    )
    assert restored.await_termination(300), "the restored query did not finish"
    found = txn_events(spark, copy)
    assert set(found) == set(producer.sizes), "every transaction the producer wrote"
    assert_whole_and_once(found, producer.sizes)
    assert txn_events(spark, table) == drained, "the original table is untouched"

    # The command line, run as a user runs it, against the real checkpoint locations.
    ckpt_text, ckpt2_text = str(tmp_path / "ckpt"), str(tmp_path / "ckpt2")
    history = cli("history", ckpt_text, "--json")
    records = [json.loads(line) for line in history.stdout.splitlines()]
    published_ids = [r["checkpoint_id"] for r in records if r["delta_version"] is not None]
    assert published_ids == list(range(final.checkpoint_id + 1)), "every batch, published once"
    assert any(r["savepoints"] for r in records), "the savepoints are in the history"
    assert all(r["publishLatency"] >= 0 for r in records if r["publishLatency"] is not None)
    text = cli("history", ckpt_text).stdout
    assert f"savepoint created: {Path(early.location).as_posix()}" in text
    status = json.loads(cli("status", ckpt2_text, "--json").stdout)
    assert status["sinks"]["delta-2pc"]["table"] == str(copy)
    assert status["sinks"]["delta-2pc"]["published"] == status["lastCompleted"]
    assert status["sinks"]["delta-2pc"]["pending"] == []
    picture = tmp_path / "timeline.png"
    assert cli("plot", ckpt2_text, "-o", str(picture)).returncode == 0
    assert picture.stat().st_size > 10_000
    assert picture.read_bytes()[16:24] == struct.pack(">II", 1100, 600), "PNG IHDR width, height"
    listed = cli("savepoint", "list", str(saved), "--json")
    assert [json.loads(line)["checkpoint"] for line in listed.stdout.splitlines()] == [
        early.checkpoint_id
    ], "the final savepoint was moved away"


SCRIPT = Path(sys.executable).with_name("spark-ckpt")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the console script; fail the test with its stderr when it fails."""
    done = subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"spark-ckpt {' '.join(args)}: {done.stderr}"
    return done
