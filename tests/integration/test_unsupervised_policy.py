"""The failure policy and the history hold for a plain ``writeStream...start()`` after install().

No supervisor builds these queries: the ``txn-cdc`` reader applies the session's policy itself,
and the listener keeps the history in the checkpoint location.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import spark_ckpt
from harness.workloads.streams import expected_notes, generated, table_notes
from spark_ckpt.errors import CheckpointPolicyError
from spark_ckpt.model.events import DeclineEvent, FailureEvent
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def never_ending_transaction(log: Path) -> None:
    """Append a file whose transaction never ends: the source holds it back forever."""
    event = {
        "op": "c",
        "before": None,
        "after": {"id": 1, "note": "never"},
        "source": {"schema": "s", "table": "t", "ts_ms": 1},
        "transaction": {"id": "never-ends", "total_order": 1, "data_collection_order": 1},
    }
    (log / "99999999.jsonl").write_text(
        json.dumps({"status": "BEGIN", "id": "never-ends"}) + "\n" + json.dumps(event) + "\n"
    )


def plain_query(spark: SparkSession, tmp_path: Path) -> StreamingQuery:
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", "40")
        .option("softDeclineTimeout", "1s")
        .load(str(tmp_path / "log"))
        .writeStream.format("delta-2pc")
        .option("path", str(tmp_path / "table"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_a_query_declined_hard_past_the_tolerable_count_is_stopped_with_its_chain(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """tolerableFailedCheckpoints=1: stopped at the second counted failure.

    It comes a checkpointTimeout after the first; the chain is in the error and in the history,
    and everything before the never-ending transaction is published exactly.
    """
    expected = generated(tmp_path / "log", 9)
    never_ending_transaction(tmp_path / "log")
    restart_conf(tolerableFailedCheckpoints="1", checkpointTimeout="2s")
    query = plain_query(spark, tmp_path)
    began = time.monotonic()
    with pytest.raises(CheckpointPolicyError) as info:
        control.await_termination(query, 180)
    elapsed = time.monotonic() - began
    message = str(info.value)
    assert "spark.ckpt.tolerableFailedCheckpoints=1" in message
    assert "source declined (hard)" in message
    assert "(attempt 2)" in message, "the second counted failure is the second attempt"
    assert "exceeded softDeclineTimeout=1s" in message
    assert elapsed >= 1 + 2, f"stopped before softDeclineTimeout + checkpointTimeout ({elapsed})"
    assert not query.isActive
    assert table_notes(spark, tmp_path / "table") == expected_notes(expected)

    events = HistoryLog(SparkCheckpoint(str(tmp_path / "ckpt"))).events()
    records = HistoryLog(SparkCheckpoint(str(tmp_path / "ckpt"))).records()
    completed = [r.checkpoint_id for r in records if r.completed]
    assert completed, "the listener records completed checkpoints of unsupervised queries"
    assert all(r.delta_version is not None for r in records if r.completed)
    declines = [e for e in events if isinstance(e, DeclineEvent) and e.decline == "hard"]
    assert len(declines) == 2, declines
    assert {d.checkpoint for d in declines} == {max(completed) + 1}, "Spark's next batch id"
    [failed] = [e for e in events if isinstance(e, FailureEvent)]
    assert failed.reason == "QUERY_FAILED"
    assert "(attempt 2)" in failed.message


def test_a_misspelt_key_stops_an_unsupervised_query_at_its_start(
    spark: SparkSession,
    control: spark_ckpt.Control,
    restart_conf: Callable[..., None],
    tmp_path: Path,
) -> None:
    """The typo is refused when the query starts, naming the key it meant."""
    generated(tmp_path / "log", 10)
    restart_conf(tolerableFailedCheckpoint="1")
    query = plain_query(spark, tmp_path)
    with pytest.raises(spark_ckpt.ConfigError) as info:
        control.await_termination(query, 120)
    assert "Did you mean 'spark.ckpt.tolerableFailedCheckpoints'?" in str(info.value)
    assert not (tmp_path / "table" / "_delta_log").exists(), "nothing was published"
