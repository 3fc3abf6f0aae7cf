"""Checkpoint history, persisted in the checkpoint location so it survives restarts.

Every party records events under ``<checkpointLocation>/spark_ckpt/history/``: the supervisor
(starts and the checkpoint each resumed from, completed checkpoints with their progress, failures,
declines, hook data), the sink (the Delta version a checkpoint was published as). Object stores
have no append, so each event is one small object written whole, named by its time and a random
suffix: writers in different processes and on different machines never touch each other's
objects. Now and then a writer folds the oldest loose events into a *segment* (one JSON line per
event, each with the name of the object it came from, so two writers compacting at once only
duplicate lines, which reading drops) and deletes them; only the newest :data:`KEEP_SEGMENTS`
segments are kept, so the history covers roughly the last few thousand checkpoints.
:meth:`HistoryLog.records` folds the events into one :class:`CheckpointRecord` per checkpoint.
Histories written by earlier versions (``history.jsonl``, ``history.1.jsonl``) are still read.
Pure Python over the storage layer, no Spark.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from spark_ckpt.errors import StorageError
from spark_ckpt.model.events import (
    CompletedEvent,
    DeclineEvent,
    FailureEvent,
    HistoryEvent,
    HooksEvent,
    PublishedEvent,
    SavepointEvent,
    StartEvent,
    batch_ended_at,
    event_from_json,
)
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint

__all__ = ["COMPACT_AT", "KEEP_SEGMENTS", "CheckpointRecord", "HistoryLog", "observe_appends"]

_log = logging.getLogger(__name__)

AppendObserver = Callable[["HistoryLog", HistoryEvent], None]
"""``observer(log, event)``: ``event`` (its ``at`` filled in) was appended to ``log``."""

_OBSERVERS: list[AppendObserver] = []
_OBSERVERS_LOCK = threading.Lock()


def observe_appends(observer: AppendObserver) -> Callable[[], None]:
    """Tell ``observer`` about every event this process appends to any history, from now on.

    Called on the appending thread after the event is stored: it must be quick (the metrics
    exporter only queues it). Returns the function that stops the observation.
    """
    with _OBSERVERS_LOCK:
        _OBSERVERS.append(observer)

    def stop() -> None:
        with _OBSERVERS_LOCK, contextlib.suppress(ValueError):
            _OBSERVERS.remove(observer)

    return stop


COMPACT_AT = 512
"""Loose event objects beyond which a writer folds the oldest into a segment."""
KEEP_LOOSE = 64
"""Newest loose events a compaction leaves loose (a writer may still be listing them)."""
KEEP_SEGMENTS = 8
"""Segments kept; older ones are deleted (each holds about COMPACT_AT - KEEP_LOOSE events)."""
COMPACT_CHANCE = 1 / 32
"""Probability that an append looks at the loose events (one listing per ~32 appends)."""


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
        Per source: ``description``, ``startOffset``, ``endOffset`` (JSON text as Spark reports),
        and a ``txn-cdc`` source's ``status`` and ``heldBack`` as its progress event reported.
    transactions
        ``(first, last)`` ``txn_order`` of the source transactions the checkpoint covers, when
        the source's offsets tell (``txn-cdc``); None otherwise or when it covers none.
    rows
        Input rows of the completing batch.
    declines
        Source declines charged to this checkpoint: ``kind``, ``reason``, ``at``, and
        ``heldBack`` (what the source held back) when it said.
    delta_version
        The Delta table version the checkpoint was published as (``delta-2pc``), once published.
    published_at
        When it was published (seconds since the epoch, the publisher's clock).
    failures
        Failures charged to this checkpoint: ``reason``, ``message``, ``at``.
    restarts
        How many times the query was (re)started from this checkpoint.
    hooks
        Identifiers of the checkpoint hooks whose data is stored with it.
    savepoints
        Savepoints taken at this checkpoint or restored from it: ``action``, ``location``, ``at``.
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
    published_at: float | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    hooks: list[str] = field(default_factory=list)
    savepoints: list[dict[str, Any]] = field(default_factory=list)

    @property
    def completed(self) -> bool:
        """True once the checkpoint completed (Spark wrote ``commits/<id>``)."""
        return self.completed_at is not None

    @property
    def ended_at(self) -> float | None:
        """When Spark ended the batch that completed it (seconds since the epoch), if known.

        Its trigger time plus its duration: Spark writes ``commits/N`` inside the trigger, just
        before it ends. The control plane's own ``completed_at`` can be later, since progress
        events reach listeners asynchronously.
        """
        ended = batch_ended_at(self.triggered_at, self.duration_ms)
        return self.completed_at if ended is None else ended

    @property
    def publish_latency(self) -> float | None:
        """Seconds from the end of the batch that completed it to its publication, when known.

        A batch published by recovery after a crash shows the whole wait.
        """
        ended = self.ended_at
        if ended is None or self.published_at is None:
            return None
        return max(0.0, self.published_at - ended)


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
    chance
        Source of randomness deciding when an append compacts (a fake in tests).
    """

    def __init__(self, checkpoint: SparkCheckpoint, chance: random.Random | None = None) -> None:
        self.root = checkpoint.child("spark_ckpt", "history")
        self._legacy = (
            checkpoint.child("spark_ckpt", "history.1.jsonl"),
            checkpoint.child("spark_ckpt", "history.jsonl"),
        )
        self._chance = chance or random.Random()

    def append(self, event: HistoryEvent) -> None:
        """Record one event (any process; ``at`` is set to now when it has none).

        History is best-effort bookkeeping, never part of a checkpoint's correctness: a failed
        write is not an error worth failing a batch for, so storage errors are swallowed.
        """
        at = time.time()
        stored = {"at": at, **event.to_json()}
        name = f"{int((event.at or at) * 1e6):020d}-{uuid.uuid4().hex[:12]}.json"
        body = json.dumps(stored, sort_keys=True, default=str).encode()
        with contextlib.suppress(StorageError):
            self.root.child(name).write_bytes(body)
            if self._chance.random() < COMPACT_CHANCE:
                self.compact()
        with _OBSERVERS_LOCK:
            observers = list(_OBSERVERS)
        if observers:
            stamped = event if event.at is not None else dataclasses.replace(event, at=at)
            for observer in observers:
                try:
                    observer(self, stamped)
                except Exception:  # bookkeeping must never fail the appender
                    _log.exception("a history observer failed")

    def compact(self) -> None:
        """Fold the oldest loose events into a segment once there are too many (any process)."""
        loose = [e.name for e in self.root.list() if e.name.endswith(".json")]
        if len(loose) <= COMPACT_AT:
            return
        folded = sorted(loose)[: len(loose) - KEEP_LOOSE]
        lines = []
        for name in folded:
            data = self.root.child(name).read_bytes()
            with contextlib.suppress(ValueError):
                value = json.loads(data or b"")
                if isinstance(value, dict):
                    lines.append(json.dumps({**value, "id": name}, sort_keys=True, default=str))
        segment = f"{folded[0][:-5]}_{folded[-1][:-5]}.jsonl"
        self.root.child("segments", segment).write_bytes(("\n".join(lines) + "\n").encode())
        for name in folded:
            self.root.child(name).delete()
        segments = sorted(e.name for e in self.root.child("segments").list())
        for old in segments[: max(0, len(segments) - KEEP_SEGMENTS)]:
            self.root.child("segments", old).delete()

    def write_segment(self, events: Iterable[HistoryEvent]) -> None:
        """Store ``events`` as one segment (a savepoint's copy of the history; any process)."""
        lines = []
        token = uuid.uuid4().hex[:12]
        for index, event in enumerate(events):
            value = {**event.to_json(), "id": f"imported-{token}-{index:08d}"}
            lines.append(json.dumps(value, sort_keys=True, default=str))
        if lines:
            name = f"{int(time.time() * 1e6):020d}-imported.jsonl"
            self.root.child("segments", name).write_bytes(("\n".join(lines) + "\n").encode())

    def _values(self) -> Iterable[tuple[str | None, bytes]]:
        # Loose events are listed before segments are read: a compaction in between moves
        # events into a segment this reader then sees (a listed object deleted meanwhile reads
        # as empty).
        loose = [e.name for e in self.root.list() if e.name.endswith(".json")]
        for legacy in self._legacy:
            yield None, legacy.read_bytes() or b""
        segments = self.root.child("segments")
        for entry in segments.list():
            yield None, segments.child(entry.name).read_bytes() or b""
        for name in loose:
            yield name, self.root.child(name).read_bytes() or b""

    def events(self) -> list[HistoryEvent]:
        """Every readable event, oldest first (a torn line or an unknown kind is skipped)."""
        found: list[HistoryEvent] = []
        seen: set[str] = set()
        for name, data in self._values():
            for line in data.decode("utf-8", errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    value = json.loads(line)
                    if not isinstance(value, dict):
                        continue
                    key = value.pop("id", None) or name
                    if key is not None:
                        if key in seen:
                            continue  # folded into two segments by racing compactions
                        seen.add(key)
                    event = event_from_json(value)
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
            decline: dict[str, Any] = {
                "kind": event.decline,
                "reason": event.reason,
                "at": event.at,
            }
            if event.held is not None:
                decline["heldBack"] = dict(event.held)
            record(event.checkpoint).declines.append(decline)
        elif isinstance(event, PublishedEvent):
            rec = record(event.checkpoint)
            rec.delta_version = event.delta_version
            rec.published_at = event.at
        elif isinstance(event, HooksEvent):
            record(event.checkpoint).hooks = list(event.identifiers)
        elif isinstance(event, SavepointEvent):
            record(event.checkpoint).savepoints.append(
                {"action": event.action, "location": event.location, "at": event.at}
            )
    return [records[k] for k in sorted(records)]
