"""Checkpoint history: events folded into one record per checkpoint, persisted and rotated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import spark_ckpt.state.history as history
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog, fold, progress_event


def progress(batch: int, start: int, end: int, rows: int) -> dict[str, object]:
    """A StreamingQueryProgress in JSON form, as Spark reports a txn-cdc source."""
    return {
        "batchId": batch,
        "timestamp": "2026-11-22T01:00:00.000Z",
        "batchDuration": 120,
        "numInputRows": rows,
        "sources": [
            {
                "description": "txn-cdc",
                "startOffset": json.dumps({"checkpoint": batch - 1, "emitted": start}),
                "endOffset": json.dumps({"checkpoint": batch, "emitted": end}),
                "numInputRows": rows,
            }
        ],
    }


def test_a_checkpoint_record_gathers_everything_that_happened_to_it() -> None:
    events = [
        {"event": "start", "at": 1.0, "restored": None},
        {"event": "decline", "at": 2.0, "checkpoint": 0, "kind": "soft", "reason": "T1 open"},
        {**progress_event(progress(0, 0, 3, 17)), "at": 3.0},
        {"event": "hooks", "at": 2.5, "checkpoint": 0, "identifiers": ["h"]},
        {"event": "published", "at": 3.5, "checkpoint": 0, "deltaVersion": 0},
        {"event": "failure", "at": 4.0, "checkpoint": 1, "reason": "CHECKPOINT_EXPIRED"},
        {"event": "failure", "at": 4.5, "checkpoint": None, "reason": "QUERY_FAILED"},
        {"event": "start", "at": 5.0, "restored": 0},
        {"event": "start", "at": 6.0, "restored": 0},
    ]
    first, second = fold(events)
    assert first.checkpoint_id == 0
    assert first.completed
    assert first.completed_at == 3.0
    assert first.rows == 17
    assert first.duration_ms == 120
    assert first.transactions == (0, 2)
    assert first.declines == [{"kind": "soft", "reason": "T1 open", "at": 2.0}]
    assert first.delta_version == 0
    assert first.hooks == ["h"]
    assert first.restarts == 2
    assert first.failures == []
    assert second.checkpoint_id == 1
    assert not second.completed
    assert [f["reason"] for f in second.failures] == ["CHECKPOINT_EXPIRED"]


def test_a_batch_without_transactions_has_no_range() -> None:
    (record,) = fold([{**progress_event(progress(4, 9, 9, 0)), "at": 1.0}])
    assert record.transactions is None


def test_history_survives_new_log_objects_and_skips_a_torn_line(tmp_path: Path) -> None:
    checkpoint = SparkCheckpoint(str(tmp_path / "ckpt"))
    HistoryLog(checkpoint).append(progress_event(progress(0, 0, 2, 5)))
    HistoryLog(checkpoint).append({"event": "published", "checkpoint": 0, "deltaVersion": 3})
    with open(HistoryLog(checkpoint).path, "a", encoding="utf-8") as handle:
        handle.write('{"event": "completed", "checkpo')  # a crash mid-append
    (record,) = HistoryLog(checkpoint).records()
    assert (record.checkpoint_id, record.rows, record.delta_version) == (0, 5, 3)


def test_rotation_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "ROTATE_BYTES", 2000)
    log = HistoryLog(SparkCheckpoint(str(tmp_path / "ckpt")))
    for batch in range(40):
        log.append(progress_event(progress(batch, batch, batch + 1, 1)))
    ids = [r.checkpoint_id for r in log.records()]
    assert ids == list(range(ids[0], 40)), "the newest checkpoints are kept, without gaps"
    assert 0 < ids[0] < 40, "older checkpoints were rotated away"
    assert Path(log.path).stat().st_size <= 2000 + 600
