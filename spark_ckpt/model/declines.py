"""Source-side decline tracking with FLIP-170's local escalation.

A source that refuses every cut beyond its start offset is *holding data back*. Each refusal is a
decline: soft (expected to clear by itself, e.g. a transaction still waiting for its END) or hard
(will not clear). A soft decline is escalated to hard once the held-back data has made no
progress for longer than the configured bound (``softDeclineTimeout``; see
:mod:`spark_ckpt.model.held_back` for what progress is), or, when the source does not say what it
holds back, once the streak of declines has lasted that long. So a source stuck on an unfinished
transaction eventually counts as a failed checkpoint, and one still receiving a large snapshot
never does.

Pure Python (no Spark import); the clock is injected so the rules are tested without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spark_ckpt.errors import UsageError
from spark_ckpt.model.availability import SnapshotAvailability
from spark_ckpt.model.durations import UNLIMITED, format_duration

__all__ = ["Decline", "DeclineReport", "DeclineTracker"]


@dataclass(frozen=True)
class DeclineReport:
    """A source's current decline, as its reader process tells the supervisor.

    What :class:`Decline` says, less how long data has been held back (that changes every
    trigger; the supervisor measures time itself), so a report changes only when the decline
    does.

    Attributes
    ----------
    checkpoint_id
        The checkpoint the source refused.
    kind
        ``"soft"`` or ``"hard"``.
    reason
        Why, in words.
    held_since_ms
        Wall-clock epoch milliseconds since which data has been held back.
    held_changes
        Change events held back, when the source knows it.
    escalated
        True when a soft decline became hard because it lasted too long.
    held
        What the source holds back (``heldBack`` of its progress events, less ``heldForMs``,
        which changes every trigger), when it says.
    """

    checkpoint_id: int
    kind: str
    reason: str
    held_since_ms: int
    held_changes: int | None
    escalated: bool
    held: dict[str, Any] | None = None

    def to_json(self) -> dict[str, object]:
        """The form stored between processes (stable keys)."""
        return {
            "checkpoint": self.checkpoint_id,
            "kind": self.kind,
            "reason": self.reason,
            "heldSinceMs": self.held_since_ms,
            "heldChanges": self.held_changes,
            "escalated": self.escalated,
            "heldBack": self.held,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> DeclineReport:
        """Read :meth:`to_json`'s form.

        Raises
        ------
        KeyError, TypeError, ValueError
            When ``value`` is not such a report.
        """
        held = value["heldChanges"]
        back = value.get("heldBack")
        return cls(
            int(value["checkpoint"]),
            str(value["kind"]),
            str(value["reason"]),
            int(value["heldSinceMs"]),
            None if held is None else int(held),
            bool(value["escalated"]),
            dict(back) if isinstance(back, dict) else None,
        )


@dataclass(frozen=True)
class Decline:
    """One refused checkpoint, as the source reports it.

    Attributes
    ----------
    checkpoint_id
        The checkpoint that was refused.
    availability
        The effective answer (soft, or hard after escalation).
    held_since
        Wall-clock time (epoch seconds) since which data has been held back without a cut.
    held_for
        Seconds data has been held back, at the time of this decline.
    held_changes
        Change events read but held back, when the source knows it.
    escalated
        True when a soft decline became hard because it lasted too long.
    """

    checkpoint_id: int
    availability: SnapshotAvailability
    held_since: float
    held_for: float
    held_changes: int | None
    escalated: bool

    def report(self, held: dict[str, Any] | None = None) -> DeclineReport:
        """What the reader tells the supervisor about this decline (``held``: what it holds)."""
        return DeclineReport(
            self.checkpoint_id,
            "hard" if self.availability.is_hard else "soft",
            self.availability.message,
            round(self.held_since * 1000),
            self.held_changes,
            self.escalated,
            held,
        )

    def to_json(self) -> dict[str, object]:
        """Render for ``reportLatestOffset`` (stable keys, JSON primitives only)."""
        return {
            "checkpoint": self.checkpoint_id,
            "kind": "hard" if self.availability.is_hard else "soft",
            "reason": self.availability.message,
            "heldSinceMs": round(self.held_since * 1000),
            "heldForMs": round(self.held_for * 1000),
            "heldChanges": self.held_changes,
            "escalated": self.escalated,
        }


class DeclineTracker:
    """Tracks the current streak of declines of one source and escalates long soft ones.

    Lives in the driver-side reader process; called once per trigger.

    Parameters
    ----------
    soft_decline_timeout
        Seconds held-back data may go without progress (or, when the source does not say what
        it holds back, a streak of soft declines may last) before soft declines are reported as
        hard (``math.inf``: never escalate).
    clock
        Returns the current time in epoch seconds.
    """

    def __init__(
        self,
        soft_decline_timeout: float = UNLIMITED,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if soft_decline_timeout <= 0:
            raise UsageError(f"soft_decline_timeout must be positive, got {soft_decline_timeout}")
        self._timeout = soft_decline_timeout
        self._clock = clock
        self._held_since: float | None = None
        self.current: Decline | None = None
        """The latest decline of the running streak (None when the last trigger cut or idled)."""
        self.soft_declines = 0
        """Soft declines reported since the reader started."""
        self.hard_declines = 0
        """Hard declines reported (including escalated ones) since the reader started."""

    @property
    def timeout(self) -> float:
        """``softDeclineTimeout`` in seconds (``math.inf``: never escalate)."""
        return self._timeout

    def decline(
        self,
        checkpoint_id: int,
        availability: SnapshotAvailability,
        held_changes: int | None,
        *,
        stalled_for: float | None = None,
        oldest: str | None = None,
    ) -> Decline:
        """Record that ``checkpoint_id`` was refused; escalate a soft refusal that lasted too long.

        Parameters
        ----------
        checkpoint_id
            The refused checkpoint.
        availability
            The source's answer; must not be available.
        held_changes
            Change events held back, if known.
        stalled_for
            Seconds since the held-back data last made progress, when the source says what it
            holds back: escalation is measured by it. None: by the length of the streak.
        oldest
            The oldest unit held back, named in an escalated decline's reason.

        Returns
        -------
        Decline
            What was recorded, with the effective (possibly escalated) availability.
        """
        if availability.is_available:
            raise UsageError("an AVAILABLE answer is not a decline")
        now = self._clock()
        if self._held_since is None:
            self._held_since = now
        held_for = now - self._held_since
        quiet = held_for if stalled_for is None else stalled_for
        escalated = not availability.is_hard and quiet > self._timeout
        effective = availability
        if escalated:
            # No duration in the reason: it is the decline's identity in reports and history
            # (how long data has been held back is in held_for / heldForMs).
            bound = f"softDeclineTimeout={format_duration(self._timeout)}"
            if stalled_for is None:
                what = f"soft declines exceeded {bound}"
            else:
                what = f"held-back data exceeded {bound} without progress"
            if oldest is not None:
                what += f"; the oldest held back is {oldest}"
            effective = SnapshotAvailability.hard_failure(f"{what}: {availability.message}")
        if effective.is_hard:
            self.hard_declines += 1
        else:
            self.soft_declines += 1
        self.current = Decline(
            checkpoint_id, effective, self._held_since, held_for, held_changes, escalated
        )
        return self.current

    def accept(self) -> None:
        """A cut was made: the streak of declines (if any) ends."""
        self._held_since = None
        self.current = None

    def idle(self) -> None:
        """Nothing is held back (no new data): an idle source is not declining."""
        self.accept()
