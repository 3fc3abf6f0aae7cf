"""Checkpoint history, persisted in the checkpoint location so it survives restarts.

Every party appends events to ``<checkpointLocation>/spark_ckpt/history.jsonl``: the supervisor
(starts and the checkpoint each resumed from, completed checkpoints with their progress, failures,
declines, hook data), the sink (the Delta version a checkpoint was published as). Appends are
single ``O_APPEND`` writes of one line, so writers in different processes do not interleave; a
line torn by a crash is skipped when reading. :meth:`HistoryLog.records` folds the events into one
:class:`CheckpointRecord` per checkpoint. The file is rotated at :data:`ROTATE_BYTES` (the
previous file is kept), so the history covers roughly the last few thousand checkpoints. Pure
Python, no Spark.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from spark_ckpt.model.events import (
    CompletedEvent,
    DeclineEvent,
    FailureEvent,
    HistoryEvent,
    HooksEvent,
    PublishedEvent,
    StartEvent,
    event_from_json,
)
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint

__all__ = ["ROTATE_BYTES", "CheckpointRecord", "HistoryLog"]

ROTATE_BYTES = 4 * 1024 * 1024
"""The history file is rotated when it grows past this size (one older file is kept)."""

_ROTATE_LOCK = threading.Lock()


@dataclass
class CheckpointRecord:
    """What happened to one checkpoint (one Spark micro-batch id).

    Attributes
    ----------
    checkpoint_id
        The batch id.
    triggered_at
        When Spark triggered the batch that completed it (ISO 8601, from the progress event).
    completed_at
        When the control plane saw it complete (seconds since the epoch); None if it never did.
    duration_ms
        How long the completing batch ran, in milliseconds.
    sources
        Per source: ``description``, ``startOffset``, ``endOffset`` (JSON text as Spark reports).
    transactions
        ``(first, last)`` ``txn_order`` of the source transactions the checkpoint covers, when
        the source's offsets tell (``txn-cdc``); None otherwise or when it covers none.
    rows
        Input rows of the completing batch.
    declines
        Source declines charged to this checkpoint: ``kind``, ``reason``, ``at``.
    delta_version
        The Delta table version the checkpoint was published as (``delta-2pc``), once published.
    failures
        Failures charged to this checkpoint: ``reason``, ``message``, ``at``.
    restarts
        How many times the query was (re)started from this checkpoint.
    hooks
        Identifiers of the checkpoint hooks whose data is stored with it.
    """

    checkpoint_id: int
    triggered_at: str | None = None
    completed_at: float | None = None
    duration_ms: int | None = None
    sources: list[dict[str, Any]] = field(default_factory=list)
    transactions: tuple[int, int] | None = None
    rows: int | None = None
    declines: list[dict[str, Any]] = field(default_factory=list)
    delta_version: int | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    hooks: list[str] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        """True once the checkpoint completed (Spark wrote ``commits/<id>``)."""
        return self.completed_at is not None


def _offset(text: object) -> dict[str, Any] | None:
    if isinstance(text, dict):
        return text
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _transactions(sources: list[dict[str, Any]]) -> tuple[int, int] | None:
    # txn-cdc offsets count the transactions emitted before the cut; txn_order numbers them.
    firsts, lasts = [], []
    for source in sources:
        start, end = _offset(source.get("startOffset")), _offset(source.get("endOffset"))
        if end is None or not isinstance(end.get("emitted"), int):
            continue
        begin = start.get("emitted", 0) if start is not None else 0
        if isinstance(begin, int) and end["emitted"] > begin:
            firsts.append(begin)
            lasts.append(end["emitted"] - 1)
    return (min(firsts), max(lasts)) if firsts else None


class HistoryLog:
    """The history of the query on one checkpoint location.

    Parameters
    ----------
    checkpoint
        The query's checkpoint location.
    """

    def __init__(self, checkpoint: SparkCheckpoint) -> None:
        self.path = checkpoint.path("spark_ckpt", "history.jsonl")
        self._previous = self.path[: -len(".jsonl")] + ".1.jsonl"

    def append(self, event: HistoryEvent) -> None:
        """Append one event (any process; ``at`` is set to now when it has none).

        History is best-effort bookkeeping, never part of a checkpoint's correctness: a failed
        append is not an error worth failing a batch for, so I/O errors are swallowed.
        """
        stored = {"at": time.time(), **event.to_json()}
        line = json.dumps(stored, sort_keys=True, default=str) + "\n"
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size > ROTATE_BYTES:
                self._rotate()

    def _rotate(self) -> None:
        # A writer that opened the file before the rename appends to the renamed file, which is
        # still read; nothing is lost but the file before the previous one.
        with _ROTATE_LOCK, contextlib.suppress(FileNotFoundError):
            if os.path.getsize(self.path) > ROTATE_BYTES:
                os.replace(self.path, self._previous)

    def events(self) -> list[HistoryEvent]:
        """Every readable event, oldest first (a torn line or an unknown kind is skipped)."""
        found: list[HistoryEvent] = []
        for path in (self._previous, self.path):
            try:
                with open(path, encoding="utf-8") as handle:
                    lines = handle.readlines()
            except FileNotFoundError:
                continue
            for line in lines:
                with contextlib.suppress(ValueError):
                    value = json.loads(line)
                    event = event_from_json(value) if isinstance(value, dict) else None
                    if event is not None:
                        found.append(event)
        found.sort(key=lambda e: e.at or 0.0)
        return found

    def records(self) -> list[CheckpointRecord]:
        """One record per checkpoint that anything happened to, by checkpoint id."""
        return fold(self.events())


def fold(events: Iterable[HistoryEvent]) -> list[CheckpointRecord]:
    """Fold history events (oldest first) into records by checkpoint id."""
    records: dict[int, CheckpointRecord] = {}

    def record(checkpoint: int) -> CheckpointRecord:
        return records.setdefault(checkpoint, CheckpointRecord(checkpoint))

    for event in events:
        if isinstance(event, StartEvent):
            if event.restored is not None:
                record(event.restored).restarts += 1
        elif isinstance(event, CompletedEvent):
            rec = record(event.checkpoint)
            rec.completed_at = event.at
            rec.triggered_at = event.triggered_at
            rec.duration_ms = event.duration_ms
            rec.rows = event.rows
            rec.sources = [dict(s) for s in event.sources]
            rec.transactions = _transactions(rec.sources)
        elif isinstance(event, FailureEvent):
            if event.checkpoint is not None:  # else a failure not tied to one checkpoint
                record(event.checkpoint).failures.append(
                    {"reason": event.reason, "message": event.message, "at": event.at}
                )
        elif isinstance(event, DeclineEvent):
            record(event.checkpoint).declines.append(
                {"kind": event.decline, "reason": event.reason, "at": event.at}
            )
        elif isinstance(event, PublishedEvent):
            record(event.checkpoint).delta_version = event.delta_version
        elif isinstance(event, HooksEvent):
            record(event.checkpoint).hooks = list(event.identifiers)
    return [records[k] for k in sorted(records)]
