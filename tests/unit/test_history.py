"""Checkpoint history: events folded into one record per checkpoint, persisted and compacted."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

import spark_ckpt.state.history as history
from spark_ckpt.model.events import (
    CompletedEvent,
    DeclineEvent,
    FailureEvent,
    HooksEvent,
    PublishedEvent,
    SavepointEvent,
    StartEvent,
    event_from_json,
)
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog, fold


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
        StartEvent(0, None, at=1.0),
        DeclineEvent(0, "soft", "T1 open", at=2.0),
        replace(CompletedEvent.of_progress(progress(0, 0, 3, 17)), at=3.0),
        HooksEvent(0, ("h",), at=2.5),
        PublishedEvent(0, 0, at=3.5),
        FailureEvent(1, "CHECKPOINT_EXPIRED", at=4.0),
        FailureEvent(None, "QUERY_FAILED", at=4.5),
        StartEvent(1, 0, at=5.0),
        StartEvent(2, 0, at=6.0),
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
    (record,) = fold([replace(CompletedEvent.of_progress(progress(4, 9, 9, 0)), at=1.0)])
    assert record.transactions is None


def test_history_reads_the_files_of_earlier_versions_and_skips_a_torn_line(
    tmp_path: Path,
) -> None:
    checkpoint = SparkCheckpoint(str(tmp_path / "ckpt"))
    legacy = tmp_path / "ckpt" / "spark_ckpt" / "history.jsonl"
    legacy.parent.mkdir(parents=True)
    completed = {"at": 1.0, **CompletedEvent.of_progress(progress(0, 0, 2, 5)).to_json()}
    legacy.write_text(json.dumps(completed) + "\n" + '{"event": "completed", "checkpo')
    HistoryLog(checkpoint).append(PublishedEvent(0, 3))
    (record,) = HistoryLog(checkpoint).records()
    assert (record.checkpoint_id, record.rows, record.delta_version) == (0, 5, 3)


class _Always(random.Random):
    def random(self) -> float:
        return 0.0


def test_compaction_keeps_the_newest_checkpoints_without_gaps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history, "COMPACT_AT", 20)
    monkeypatch.setattr(history, "KEEP_LOOSE", 5)
    monkeypatch.setattr(history, "KEEP_SEGMENTS", 2)
    log = HistoryLog(SparkCheckpoint(str(tmp_path / "ckpt")), chance=_Always())
    for batch in range(80):
        log.append(
            replace(
                CompletedEvent.of_progress(progress(batch, batch, batch + 1, 1)), at=batch + 1.0
            )
        )
    ids = [r.checkpoint_id for r in log.records()]
    assert ids == list(range(ids[0], 80)), "the newest checkpoints are kept, without gaps"
    assert 0 < ids[0] < 80 - 20, "older checkpoints were compacted away"
    loose = [p for p in (tmp_path / "ckpt" / "spark_ckpt" / "history").iterdir() if p.is_file()]
    assert len(loose) <= 20
    assert len(list((tmp_path / "ckpt" / "spark_ckpt" / "history" / "segments").iterdir())) == 2


def test_racing_compactions_do_not_duplicate_events(tmp_path: Path) -> None:
    log = HistoryLog(SparkCheckpoint(str(tmp_path / "ckpt")))
    for batch in range(3):
        log.append(PublishedEvent(batch, batch))
    root = tmp_path / "ckpt" / "spark_ckpt" / "history"
    lines = []
    for path in sorted(root.iterdir()):
        lines.append(json.dumps({**json.loads(path.read_text()), "id": path.name}))
    (root / "segments").mkdir()
    for copy in ("a", "b"):  # two writers folded the same events, one deleted them
        (root / "segments" / f"{copy}.jsonl").write_text("\n".join(lines) + "\n")
    assert [e.checkpoint for e in log.events()] == [0, 1, 2]


@pytest.mark.parametrize(
    "event",
    [
        StartEvent(2, 7, 8, at=1.5),
        StartEvent(0, None, at=1.0),
        CompletedEvent(3, "2026-11-22T01:00:00.000Z", 120, 17, ({"endOffset": "{}"},), at=2.0),
        FailureEvent(None, "QUERY_FAILED", "boom", at=3.0),
        DeclineEvent(4, "hard", "T9 waits", at=4.0),
        DeclineEvent(4, "soft", "T9 waits", {"changes": 2, "oldest": "T9"}, at=4.5),
        PublishedEvent(4, 12, "/lake/t", at=5.0),
        HooksEvent(4, ("a", "b"), at=6.0),
        SavepointEvent(4, "s3://b/sp/savepoint-0c5e3c-4-1a2b3c4d", "created", at=7.0),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_event_round_trips_through_its_stored_json(event: object) -> None:
    """to_json and event_from_json are inverses; the stored keys stay camelCase."""
    stored = json.loads(json.dumps(event.to_json()))  # type: ignore[attr-defined]
    assert event_from_json(stored) == event


def test_unknown_or_malformed_events_are_skipped_when_read() -> None:
    """A newer writer's event kind, or one without its checkpoint, reads as nothing."""
    assert event_from_json({"event": "rescaled", "at": 1.0, "checkpoint": 3}) is None
    assert event_from_json({"event": "published", "at": 1.0}) is None


def test_a_completed_event_keeps_the_sources_status_when_one_is_reported() -> None:
    """A txn-cdc source's ``status`` (in its latestOffset) is kept; other sources add nothing."""
    status = {"connector": "postgres", "slot": "s", "lagBytes": 120, "lagSeconds": 0.5}
    event = progress(3, 0, 1, 2)
    sources = event["sources"]
    assert isinstance(sources, list)
    sources[0]["latestOffset"] = json.dumps({"connector": "postgres", "status": status})
    sources.append({"description": "rate", "latestOffset": "not json"})
    completed = CompletedEvent.of_progress(event)
    assert completed.sources[0]["status"] == status
    assert "status" not in completed.sources[1]
    read_back = event_from_json({"at": 1.0, **completed.to_json()})
    assert isinstance(read_back, CompletedEvent)
    assert read_back.sources[0]["status"] == status


def test_held_back_data_is_kept_with_completed_checkpoints_and_declines() -> None:
    """The ``heldBack`` of progress events (None: nothing held) and of declines is kept."""
    held = {"changes": 2, "transactions": 1, "oldest": "T1", "sinceMs": 1000, "reason": "r"}
    event = progress(3, 0, 1, 2)
    sources = event["sources"]
    assert isinstance(sources, list)
    sources[0]["latestOffset"] = json.dumps({"connector": "debezium-json", "heldBack": held})
    sources.append({"description": "other", "latestOffset": json.dumps({"heldBack": None})})
    completed = CompletedEvent.of_progress(event)
    assert completed.sources[0]["heldBack"] == held
    assert completed.sources[1]["heldBack"] is None
    [record, declined] = fold([completed, DeclineEvent(4, "soft", "r", held, at=9.0)])
    assert record.sources[0]["heldBack"] == held
    assert declined.declines == [{"kind": "soft", "reason": "r", "at": 9.0, "heldBack": held}]
