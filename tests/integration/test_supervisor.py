"""Supervised queries: restarts after real query failures, exact results, independence."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from deltalake import DeltaTable
from pyspark.sql.functions import col, udf

import spark_ckpt
from harness.workloads.streams import expected_notes, failing_writer, generated, table_notes
from spark_ckpt.errors import SupervisedQueryError, UnknownOptionError
from spark_ckpt.model.events import DeclineEvent
from spark_ckpt.model.failures import FailureReason
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter


@pytest.mark.quick
def test_failed_query_is_restarted_and_resumes_exactly(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """A query that throws once is restarted from its checkpoint; the table is exact."""
    expected = generated(tmp_path / "log", 1)
    marker = tmp_path / "fail-once"
    marker.touch()
    restart_conf(restartStrategy="fixed-delay", restartStrategy__fixedDelay__delay="500ms")
    supervised = control.supervise(
        failing_writer(spark, tmp_path / "log", tmp_path / "table", marker),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="restart-once",
    )
    assert supervised.await_termination(300), "the supervised query did not finish"
    assert supervised.restarts == 1
    assert not marker.exists()
    assert table_notes(spark, tmp_path / "table") == expected_notes(expected)


def test_no_restart_left_fails_with_the_reason_chain(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """When the strategy allows no more restarts, the error names what failed and why."""
    generated(tmp_path / "log", 2)
    marker = tmp_path / "fail-always"
    marker.touch()
    restart_conf(
        restartStrategy="fixed-delay",
        restartStrategy__fixedDelay__attempts="1",
        restartStrategy__fixedDelay__delay="0s",
    )
    supervised = control.supervise(
        failing_writer(spark, tmp_path / "log", tmp_path / "table", marker, always=True),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="always-fails",
    )
    with pytest.raises(SupervisedQueryError) as info:
        supervised.await_termination(300)
    message = str(info.value)
    assert "'always-fails'" in message
    assert "fixed-delay allows 1 restart(s)" in message
    assert "query failed" in message
    assert "injected failure" in message
    assert supervised.restarts == 1


def test_two_supervised_queries_do_not_affect_each_other(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """One query failing for good leaves another, running at the same time, untouched."""
    good_expected = generated(tmp_path / "good-log", 3)
    generated(tmp_path / "bad-log", 4)
    marker = tmp_path / "bad-marker"
    marker.touch()
    restart_conf(restartStrategy="none")
    bad = control.supervise(
        failing_writer(spark, tmp_path / "bad-log", tmp_path / "bad", marker, always=True),
        checkpoint_location=str(tmp_path / "bad-ckpt"),
        name="bad",
    )
    restart_conf(restartStrategy="fixed-delay")
    good = control.supervise(
        failing_writer(spark, tmp_path / "good-log", tmp_path / "good", None),
        checkpoint_location=str(tmp_path / "good-ckpt"),
        name="good",
    )
    assert good.await_termination(300)
    with pytest.raises(SupervisedQueryError, match="restartStrategy=none"):
        bad.await_termination(300)
    assert good.restarts == 0
    assert table_notes(spark, tmp_path / "good") == expected_notes(good_expected)


def test_batch_running_past_the_checkpoint_timeout_is_expired(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """A batch stuck longer than checkpointTimeout is expired, the query fails over and resumes."""
    expected = generated(tmp_path / "log", 5)
    marker = str(tmp_path / "stall-once")
    Path(marker).touch()

    def stall(order, after):  # type: ignore[no-untyped-def]  # hints make PySpark guess pandas
        if order >= 15 and os.path.exists(marker):
            with contextlib.suppress(FileNotFoundError):
                os.remove(marker)
            time.sleep(600)
        return after

    stalled = udf(stall, "string")

    def build() -> DataStreamWriter:
        frame = (
            spark.readStream.format("txn-cdc")
            .option("connector", "debezium-json")
            .option("maxChangesPerTrigger", "30")
            .load(str(tmp_path / "log"))
            .withColumn("after", stalled(col("txn_order"), col("after")))
        )
        return (
            frame.writeStream.format("delta-2pc")
            .option("path", str(tmp_path / "table"))
            .trigger(availableNow=True)
        )

    restart_conf(
        # Above a normal batch here (the first one starts Python workers: seconds), far below
        # the stall.
        checkpointTimeout="20s",
        restartStrategy="fixed-delay",
        restartStrategy__fixedDelay__delay="0s",
    )
    began = time.monotonic()
    supervised = control.supervise(
        build, checkpoint_location=str(tmp_path / "ckpt"), name="stalls-once"
    )
    assert supervised.await_termination(300)
    assert supervised.restarts == 1
    assert [f.reason for f in supervised.failovers[0]] == [FailureReason.CHECKPOINT_EXPIRED]
    assert time.monotonic() - began < 300, "the stalled batch was waited out, not expired"
    assert table_notes(spark, tmp_path / "table") == expected_notes(expected)


def open_transaction_log(directory: Path) -> None:
    """A log whose only transaction never ends: the source holds it back forever."""
    directory.mkdir(parents=True)
    event = {
        "op": "c",
        "before": None,
        "after": {"id": 1},
        "source": {"schema": "s", "table": "t", "ts_ms": 1},
        "transaction": {"id": "never-ends", "total_order": 1, "data_collection_order": 1},
    }
    (directory / "0001.jsonl").write_text(
        json.dumps({"status": "BEGIN", "id": "never-ends"}) + "\n" + json.dumps(event) + "\n"
    )


def streaming_build(
    spark: SparkSession, log: Path, table: Path, **options: str
) -> Callable[[], DataStreamWriter]:
    def build() -> DataStreamWriter:
        reader = spark.readStream.format("txn-cdc").option("connector", "debezium-json")
        for key, value in options.items():
            reader = reader.option(key, value)
        return (
            reader.load(str(log))
            .writeStream.format("delta-2pc")
            .option("path", str(table))
            .trigger(processingTime="200 milliseconds")
        )

    return build


def test_source_holding_data_back_is_restarted_after_the_timeout(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """Data held back past tolerableFailureTimeout fails over, honouring the restart delay."""
    open_transaction_log(tmp_path / "log")
    restart_conf(
        tolerableFailureTimeout="4s",
        restartStrategy="fixed-delay",
        restartStrategy__fixedDelay__attempts="1",
        restartStrategy__fixedDelay__delay="3s",
    )
    began = time.monotonic()
    supervised = control.supervise(
        streaming_build(spark, tmp_path / "log", tmp_path / "table"),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="holds-back",
    )
    with pytest.raises(SupervisedQueryError, match="held data back") as info:
        supervised.await_termination(240)
    elapsed = time.monotonic() - began
    assert supervised.restarts == 1
    assert elapsed >= 4 + 3 + 4, (
        f"timeouts and the restart delay were not honoured ({elapsed:.1f}s)"
    )
    assert "tolerableFailureTimeout=4s" in str(info.value)


def test_idle_query_is_never_restarted(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """A source with no data at all is idle, not failing, however long it waits."""
    (tmp_path / "log").mkdir()
    restart_conf(tolerableFailureTimeout="2s", restartStrategy="none")
    supervised = control.supervise(
        streaming_build(spark, tmp_path / "log", tmp_path / "table"),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="idle",
    )
    try:
        assert not supervised.await_termination(8), "an idle supervised query ended"
        assert supervised.restarts == 0
        assert supervised.failovers == []
    finally:
        supervised.stop()


def test_hard_declines_past_the_tolerable_count_fail_over(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """Soft declines escalate to hard (softDeclineTimeout); hard ones count toward failover."""
    open_transaction_log(tmp_path / "log")
    restart_conf(tolerableFailedCheckpoints="0", restartStrategy="none")
    supervised = control.supervise(
        streaming_build(spark, tmp_path / "log", tmp_path / "table", softDeclineTimeout="1s"),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="declines-hard",
    )
    with pytest.raises(SupervisedQueryError) as info:
        supervised.await_termination(240)
    assert [f.reason for f in supervised.failovers[0]] == [FailureReason.SOURCE_DECLINED_HARD]
    assert "exceeded softDeclineTimeout=1s" in str(info.value)
    assert "never-ends" in str(info.value)
    # The supervisor records what the source held back with each decline.
    history = HistoryLog(SparkCheckpoint(str(tmp_path / "ckpt")))
    declines = [e for e in history.events() if isinstance(e, DeclineEvent)]
    assert [d.decline for d in declines][-1] == "hard"
    assert all(d.held is not None and "'never-ends'" in d.held["oldest"] for d in declines)


def test_stop_with_drain_lets_the_running_batch_finish_and_publishes_it(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """stop(drain=True) during a slow batch: that batch completes and is visible afterwards."""
    expected = generated(tmp_path / "log", 6)
    marker = str(tmp_path / "slow")
    Path(marker).touch()

    def slow(order, after):  # type: ignore[no-untyped-def]  # hints make PySpark guess pandas
        if os.path.exists(marker):
            time.sleep(0.05)
        return after

    slowed = udf(slow, "string")

    def build() -> DataStreamWriter:
        return (
            spark.readStream.format("txn-cdc")
            .option("connector", "debezium-json")
            .option("maxChangesPerTrigger", "60")
            .load(str(tmp_path / "log"))
            .withColumn("after", slowed(col("txn_order"), col("after")))
            .writeStream.format("delta-2pc")
            .option("path", str(tmp_path / "table"))
            .trigger(processingTime="100 milliseconds")
        )

    supervised = control.supervise(build, checkpoint_location=str(tmp_path / "ckpt"), name="drains")
    query = supervised.query
    assert query is not None
    deadline = time.monotonic() + 120
    while not (query.lastProgress is not None and query.status.get("isTriggerActive")):
        assert time.monotonic() < deadline, "never saw a batch running after the first one"
        time.sleep(0.02)
    running = int(query.lastProgress.batchId) + 1
    supervised.stop(drain=True, timeout=120)
    checkpoint = tmp_path / "ckpt"
    assert (checkpoint / "commits" / str(running)).exists(), "the running batch was cancelled"
    published = DeltaTable(str(tmp_path / "table")).transaction_version(
        json.loads((checkpoint / "metadata").read_text())["id"]
    )
    assert published is not None
    assert published >= running
    rows = table_notes(spark, tmp_path / "table")
    assert rows == expected_notes(expected)[: len(rows)]


def test_a_misspelt_key_fails_install_and_a_supervised_start(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """An ignored typo would be a policy silently not applied: both refuse it, with the fix."""
    restart_conf(tolerableFailedCheckpoint="1")
    meant = "Did you mean 'spark.ckpt.tolerableFailedCheckpoints'"
    with pytest.raises(UnknownOptionError, match=meant):
        spark_ckpt.install(spark)

    def build() -> DataStreamWriter:
        raise AssertionError("no query may start with a misspelt spark.ckpt key")

    with pytest.raises(UnknownOptionError, match=meant):
        control.supervise(build, checkpoint_location=str(tmp_path / "ckpt"), name="typo")


def test_a_source_refusing_its_restored_checkpoint_ends_supervision_without_restarts(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """RestoreError is final: every restart would resume from the same refused checkpoint."""
    generated(tmp_path / "log", 8)
    first = control.supervise(
        failing_writer(spark, tmp_path / "log", tmp_path / "table", None),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="before-truncation",
    )
    assert first.await_termination(300), "the first run did not finish"
    last = sorted((tmp_path / "log").glob("*.jsonl"))[-1]
    last.write_text(last.read_text()[:10])  # truncated behind the checkpoint's position
    restart_conf(restartStrategy="fixed-delay", restartStrategy__fixedDelay__attempts="3")
    second = control.supervise(
        failing_writer(spark, tmp_path / "log", tmp_path / "table", None),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="after-truncation",
    )
    with pytest.raises(spark_ckpt.RestoreError, match="truncated or rewritten") as info:
        second.await_termination(300)
    assert str(info.value).startswith("the restored checkpoint")
    assert second.restarts == 0, "a refused restore is not retried"
    assert [f.reason for f in second.failovers[0]] == [FailureReason.QUERY_FAILED]
