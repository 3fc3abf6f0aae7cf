"""Checkpoint hooks, restore notifications and history with real supervised queries."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conftest import wait_until
from deltalake import DeltaTable

import spark_ckpt
from harness.workloads.streams import expected_notes, failing_writer, generated, table_notes
from spark_ckpt.model.failures import FailureReason
from spark_ckpt.spark.listener import JsonProgressListener
from spark_ckpt.state.hooks import CheckpointHook

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class CountingHook(CheckpointHook):
    """Stores ``<id>#<trigger count>`` with each checkpoint; can fail once at one checkpoint."""

    identifier = "counter"

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.calls = 0
        self.stored: dict[int, bytes] = {}
        self.restored: list[tuple[int, bytes | None]] = []

    def trigger(self, checkpoint_id: int, timestamp: float) -> bytes | None:
        self.calls += 1
        if checkpoint_id == self.fail_at:
            self.fail_at = None
            raise ConnectionError("coordinator unreachable")
        self.stored[checkpoint_id] = f"{checkpoint_id}#{self.calls}".encode()
        return self.stored[checkpoint_id]

    def restore(self, checkpoint_id: int, data: bytes | None) -> None:
        self.restored.append((checkpoint_id, data))


def staged_files_not_in_the_table(table: Path) -> set[str]:
    live = {os.path.relpath(p, table) for p in DeltaTable(str(table)).file_uris()}
    on_disk = {
        os.path.relpath(os.path.join(d, n), table)
        for d, dirs, names in os.walk(table)
        if "_delta_log" not in d
        for n in names
        if n.endswith(".parquet")
    }
    return on_disk - live


def test_hook_data_written_at_n_is_handed_back_after_a_restart_from_n(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """A query fails mid-way; the restart restores checkpoint C and the hook gets C's bytes."""
    expected = generated(tmp_path / "log", 11)
    marker = tmp_path / "fail-once"
    marker.touch()
    restart_conf(restartStrategy="fixed-delay", restartStrategy__fixedDelay__delay="0s")
    hook = CountingHook()
    supervised = control.supervise(
        failing_writer(spark, tmp_path / "log", tmp_path / "table", marker),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="hook-restore",
        hooks=[hook],
    )
    assert supervised.await_termination(300), "the supervised query did not finish"
    assert supervised.restarts == 1
    assert len(hook.restored) == 1, hook.restored
    restored_id, data = hook.restored[0]
    assert data == hook.stored[restored_id], "not the bytes stored with the restored checkpoint"
    records = {r.checkpoint_id: r for r in supervised.history()}
    assert records[restored_id].restarts == 1
    assert records[restored_id].completed
    assert table_notes(spark, tmp_path / "table") == expected_notes(expected)


def test_a_raising_hook_aborts_its_checkpoint_and_the_restart_completes_it(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """Checkpoint 2's hook raises: batch 2 never completes in that attempt, nothing leaks."""
    expected = generated(tmp_path / "log", 12)
    restart_conf(restartStrategy="fixed-delay", restartStrategy__fixedDelay__delay="0s")
    hook = CountingHook(fail_at=2)
    supervised = control.supervise(
        failing_writer(spark, tmp_path / "log", tmp_path / "table", None),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="hook-aborts",
        hooks=[hook],
    )
    assert supervised.await_termination(300), "the supervised query did not finish"
    assert supervised.restarts == 1
    (chain,) = supervised.failovers
    assert chain[0].reason is FailureReason.HOOK_TRIGGER_FAILED
    assert chain[0].checkpoint_id == 2
    assert "coordinator unreachable" in chain[0].message
    assert hook.restored == [(1, hook.stored[1])]
    assert table_notes(spark, tmp_path / "table") == expected_notes(expected)
    assert staged_files_not_in_the_table(tmp_path / "table") == set()

    records = {r.checkpoint_id: r for r in supervised.history()}
    assert [f["reason"] for f in records[2].failures] == ["HOOK_TRIGGER_FAILED"]
    assert records[2].completed, "the re-run of batch 2 completed it"
    assert records[1].restarts == 1


def test_history_has_one_record_per_checkpoint_and_survives_restarts(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """Completed checkpoints: rows, transaction ranges, Delta versions; kept across runs."""
    expected = generated(tmp_path / "log", 13)
    for run in range(2):
        supervised = control.supervise(
            failing_writer(spark, tmp_path / "log", tmp_path / "table", None),
            checkpoint_location=str(tmp_path / "ckpt"),
            name=f"history-{run}",
        )
        assert supervised.await_termination(300)
    records = [r for r in supervised.history() if r.rows]
    assert records, "no checkpoint with data"
    assert sum(r.rows or 0 for r in records) == sum(len(t.events) for t in expected)
    ranges = [r.transactions for r in records]
    assert None not in ranges
    flat = [n for first, last in ranges for n in range(first, last + 1)]  # type: ignore[misc]
    assert flat == list(range(len(expected))), "transaction ranges tile txn_order exactly"
    completed = [r for r in supervised.history() if r.completed]
    versions = [r.delta_version for r in completed]
    assert versions == list(range(len(completed))), "one Delta version per checkpoint, in order"
    assert all(r.duration_ms is not None and r.triggered_at for r in records)
    restored = [r for r in supervised.history() if r.restarts]
    assert len(restored) == 1, "the second run resumed from the first run's last checkpoint"
    assert restored[0].checkpoint_id == max(r.checkpoint_id for r in supervised.history())


class ProgressRecorder(JsonProgressListener):
    """Keeps each progress event's JSON as the control plane's bridge hands it over."""

    def __init__(self) -> None:
        self.progress: list[dict[str, Any]] = []

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        self.progress.append(json.loads(event.progress.json))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def test_the_json_bridge_hands_over_each_progress_event_as_spark_reports_it(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """Every batch's event, field for field what the query's own progress says (pyspark's way)."""
    generated(tmp_path / "log", 5)
    recorder = ProgressRecorder()
    spark.streams.addListener(recorder)
    assert recorder._bridge is not None, "pyspark registered its own bridge, not the JSON one"
    try:
        query = (
            spark.readStream.format("txn-cdc")
            .option("connector", "debezium-json")
            .option("maxChangesPerTrigger", "40")
            .load(str(tmp_path / "log"))
            .writeStream.format("delta-2pc")
            .option("path", str(tmp_path / "table"))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        assert control.await_termination(query, 120), "the query did not end within 120 s"
        reported = {p.batchId: json.loads(p.json) for p in query.recentProgress}
        assert len(reported) >= 3, f"too few batches to compare: {sorted(reported)}"
        # The bus may still deliver the last events after the query ended.
        wait_until(
            lambda: len(recorder.progress) >= len(reported), 30, "the listener missed events"
        )
    finally:
        spark.streams.removeListener(recorder)
    assert {p["batchId"]: p for p in recorder.progress} == reported
    assert all(p["durationMs"] and p["sources"] for p in recorder.progress), recorder.progress
