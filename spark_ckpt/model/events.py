"""The checkpoint history's events, typed, with their JSON form in one place.

The supervisor, the listener's workers and the sink append these to a query's history
(:mod:`spark_ckpt.state.history`); :func:`event_from_json` reads them back. The JSON keys are the
stored format: camelCase, as in Spark's progress events, and stable across releases (an event
kind this code does not know is skipped when read, so newer writers do not break older readers).

Pure Python, no Spark, no I/O.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

__all__ = [
    "CompletedEvent",
    "DeclineEvent",
    "FailureEvent",
    "HistoryEvent",
    "HooksEvent",
    "PublishedEvent",
    "SavepointEvent",
    "StartEvent",
    "batch_ended_at",
    "event_from_json",
]


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def batch_ended_at(triggered_at: str | None, duration_ms: int | None) -> float | None:
    """When a batch ended (seconds since the epoch): its trigger time plus its duration.

    Spark writes ``commits/N`` inside the trigger, just before it ends. ``None`` when either is
    unknown or the trigger time is not ISO 8601.
    """
    if triggered_at is None or duration_ms is None:
        return None
    try:
        started = datetime.datetime.fromisoformat(triggered_at.replace("Z", "+00:00"))
    except ValueError:
        return None
    return started.timestamp() + duration_ms / 1000


def _latest_offset(source: Mapping[str, Any]) -> Mapping[str, Any]:
    """A source's ``latestOffset`` report (JSON text, as Spark gives it), or ``{}``."""
    latest = source.get("latestOffset")
    if isinstance(latest, str):
        try:
            latest = json.loads(latest)
        except ValueError:
            return {}
    return latest if isinstance(latest, Mapping) else {}


def _reported(source: Mapping[str, Any]) -> dict[str, Any]:
    """What a txn-cdc source reports about itself that the history keeps.

    ``status`` (the connector's health) when it reports one; ``heldBack`` (what it holds back,
    None for nothing) whenever the source reports the key; ``connector`` (its name) and
    ``newestCommitMs`` (the commit time of the newest transaction its batches delivered, epoch
    milliseconds) when it says.
    """
    latest = _latest_offset(source)
    kept: dict[str, Any] = {}
    for key in ("connector", "newestCommitMs"):
        if latest.get(key) is not None:
            kept[key] = latest[key]
    if latest.get("status") is not None:
        kept["status"] = latest["status"]
    if "heldBack" in latest:
        kept["heldBack"] = latest["heldBack"]
    return kept


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class _Event:
    kind: ClassVar[str]
    at: float | None = field(default=None, kw_only=True)
    """When it happened (epoch seconds); filled in when the event is appended."""

    def _body(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        """The stored form: ``{"event": kind, "at": ..., ...}``."""
        value: dict[str, Any] = {"event": self.kind}
        if self.at is not None:
            value["at"] = self.at
        value.update(self._body())
        return value


@dataclass(frozen=True)
class StartEvent(_Event):
    """A (re)start of the query: attempt number, the checkpoint it resumed from."""

    kind: ClassVar[str] = "start"
    attempt: int
    restored: int | None
    rerun_batch: int | None = None

    def _body(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "restored": self.restored, "rerunBatch": self.rerun_batch}


@dataclass(frozen=True)
class CompletedEvent(_Event):
    """Checkpoint ``checkpoint`` completed (Spark wrote ``commits/N``), from its progress event."""

    kind: ClassVar[str] = "completed"
    checkpoint: int
    triggered_at: str | None = None
    duration_ms: int | None = None
    rows: int | None = None
    sources: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of_progress(cls, progress: Mapping[str, Any]) -> CompletedEvent:
        """The event for a ``StreamingQueryProgress`` in JSON form."""
        sources = tuple(
            {
                "description": s.get("description"),
                "startOffset": s.get("startOffset"),
                "endOffset": s.get("endOffset"),
                "numInputRows": s.get("numInputRows"),
                # Kept only when the source reports them (a txn-cdc connector's health).
                **_reported(s),
            }
            for s in progress.get("sources", [])
        )
        return cls(
            int(progress["batchId"]),
            progress.get("timestamp"),
            _int(progress.get("batchDuration")),
            _int(progress.get("numInputRows")),
            sources,
        )

    def _body(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "triggeredAt": self.triggered_at,
            "durationMs": self.duration_ms,
            "rows": self.rows,
            "sources": [dict(s) for s in self.sources],
        }


@dataclass(frozen=True)
class FailureEvent(_Event):
    """A failure charged to ``checkpoint`` (None: to the query), by ``FailureReason`` name."""

    kind: ClassVar[str] = "failure"
    checkpoint: int | None
    reason: str
    message: str = ""

    def _body(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "reason": self.reason, "message": self.message}


@dataclass(frozen=True)
class DeclineEvent(_Event):
    """A source declined ``checkpoint``: ``soft`` or ``hard``, why, and what it held back.

    ``held`` is the source's ``heldBack`` report when it declined (see
    :class:`spark_ckpt.model.held_back.HeldBack`), so the history shows held-back data while no
    checkpoint completes.
    """

    kind: ClassVar[str] = "decline"
    checkpoint: int
    decline: str
    reason: str
    held: Mapping[str, Any] | None = None

    def _body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "checkpoint": self.checkpoint,
            "kind": self.decline,
            "reason": self.reason,
        }
        if self.held is not None:
            body["heldBack"] = dict(self.held)
        return body


@dataclass(frozen=True)
class PublishedEvent(_Event):
    """Checkpoint ``checkpoint`` became visible as Delta version ``delta_version`` of ``table``."""

    kind: ClassVar[str] = "published"
    checkpoint: int
    delta_version: int | None
    table: str = ""

    def _body(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "deltaVersion": self.delta_version,
            "table": self.table,
        }


@dataclass(frozen=True)
class HooksEvent(_Event):
    """The checkpoint hooks whose data is stored with ``checkpoint``."""

    kind: ClassVar[str] = "hooks"
    checkpoint: int
    identifiers: tuple[str, ...]

    def _body(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "identifiers": list(self.identifiers)}


@dataclass(frozen=True)
class SavepointEvent(_Event):
    """A savepoint at ``checkpoint`` was taken (``created``) or restored (``restored``)."""

    kind: ClassVar[str] = "savepoint"
    checkpoint: int
    location: str
    action: str = "created"

    def _body(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "location": self.location, "action": self.action}


HistoryEvent = (
    StartEvent
    | CompletedEvent
    | FailureEvent
    | DeclineEvent
    | PublishedEvent
    | HooksEvent
    | SavepointEvent
)
"""Every kind of history event."""


def event_from_json(value: Mapping[str, Any]) -> HistoryEvent | None:
    """Read one stored event; None for a kind this code does not know, or a malformed one."""
    kind, at = value.get("event"), _float(value.get("at"))
    checkpoint = _int(value.get("checkpoint"))
    if kind == "start":
        return StartEvent(
            _int(value.get("attempt")) or 0,
            _int(value.get("restored")),
            _int(value.get("rerunBatch")),
            at=at,
        )
    if kind == "failure":
        return FailureEvent(
            checkpoint, _str(value.get("reason")), _str(value.get("message")), at=at
        )
    if checkpoint is None:
        return None
    if kind == "completed":
        raw = value.get("sources")
        sources = tuple(s for s in raw if isinstance(s, Mapping)) if isinstance(raw, list) else ()
        triggered = value.get("triggeredAt")
        return CompletedEvent(
            checkpoint,
            triggered if isinstance(triggered, str) else None,
            _int(value.get("durationMs")),
            _int(value.get("rows")),
            sources,
            at=at,
        )
    if kind == "decline":
        held = value.get("heldBack")
        return DeclineEvent(
            checkpoint,
            _str(value.get("kind")),
            _str(value.get("reason")),
            dict(held) if isinstance(held, Mapping) else None,
            at=at,
        )
    if kind == "published":
        return PublishedEvent(
            checkpoint, _int(value.get("deltaVersion")), _str(value.get("table")), at=at
        )
    if kind == "hooks":
        raw = value.get("identifiers")
        names = tuple(i for i in raw if isinstance(i, str)) if isinstance(raw, list) else ()
        return HooksEvent(checkpoint, names, at=at)
    if kind == "savepoint":
        return SavepointEvent(
            checkpoint, _str(value.get("location")), _str(value.get("action")), at=at
        )
    return None
