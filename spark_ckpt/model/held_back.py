"""What a source holds back, since when, and whether it still makes progress.

A source *holds changes back* when it has read changes it cannot deliver yet: a transaction
whose END (or some of whose events) has not been read, a snapshot still being taken. The reader
asks its connector on every trigger, whether or not a batch is cut, and feeds the answer to a
:class:`HeldBackTracker`, which remembers two times:

- ``since``: when the current oldest held unit was first seen as the oldest. It is what
  progress events, the history and ``spark-ckpt status`` show, and what the log warning is
  timed by (:data:`WARN_AFTER`, at most every :data:`WARN_EVERY`).
- ``progressed_at``: when the held-back data last made progress. ``softDeclineTimeout`` is
  measured from it, so a large snapshot that keeps arriving is never escalated, while a
  transaction whose remaining events never arrive is escalated that long after its last new
  record.

Progress is the oldest unit changing (it was delivered, or an older one appeared), or more
changes held in no more units than before: the units already held grew. New units queueing
behind a stuck oldest one are not its progress (a log whose every transaction stays incomplete
holds ever more changes, in ever more transactions, and never moves).

Pure Python (no Spark import); the clock is injected so the rules are tested without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spark_ckpt.errors import UsageError

__all__ = ["WARN_AFTER", "WARN_EVERY", "HeldBack", "HeldBackTracker", "describe_duration"]

WARN_AFTER = 30.0
"""Seconds the oldest unit may be held back before the reader's log warns about it. Debezium
writes a transaction's records within seconds of its commit and a trigger reads them, so half a
minute is well past the normal case and still early for a person watching the log."""
WARN_EVERY = 60.0
"""The least number of seconds between two such warnings of one reader: one line a minute
while it lasts, never one per trigger."""


def describe_duration(seconds: float) -> str:
    """A duration for people: ``850ms``, ``42s``, ``2m 10s``, ``3h 05m``."""
    if seconds < 1:
        return f"{max(0.0, seconds) * 1000:.0f}ms"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


@dataclass(frozen=True)
class HeldBack:
    """What a source holds back at one trigger.

    Attributes
    ----------
    changes
        Change events read but not deliverable yet.
    units
        Open units holding them (transactions; a snapshot in progress counts as one).
    oldest
        The oldest open unit's identity in words (the same text on every trigger while it is
        the oldest), when the connector can name it.
    reason
        Why the data is held back, in words.
    since
        Epoch seconds: when ``oldest`` was first seen as the oldest held unit.
    progressed_at
        Epoch seconds: when the held-back data last made progress.
    at
        Epoch seconds: when this was observed.
    """

    changes: int
    units: int
    oldest: str | None
    reason: str
    since: float
    progressed_at: float
    at: float

    @property
    def held_for(self) -> float:
        """Seconds the oldest unit has been held back."""
        return self.at - self.since

    @property
    def stalled_for(self) -> float:
        """Seconds since the held-back data last made progress."""
        return self.at - self.progressed_at

    def to_json(self) -> dict[str, Any]:
        """``heldBack`` of ``reportLatestOffset`` (stable keys, camelCase, JSON primitives)."""
        return {
            "changes": self.changes,
            "transactions": self.units,
            "oldest": self.oldest,
            "sinceMs": round(self.since * 1000),
            "heldForMs": round(self.held_for * 1000),
            "lastProgressMs": round(self.progressed_at * 1000),
            "reason": self.reason,
        }

    def describe(self) -> str:
        """One line for the log: how much, in how many units, the oldest, how long, and why."""
        units = f"{self.units} open transaction{'s' if self.units != 1 else ''}"
        oldest = f"; the oldest is {self.oldest}" if self.oldest else ""
        return (
            f"{self.changes} change(s) held back in {units} for "
            f"{describe_duration(self.held_for)}{oldest} (last progress "
            f"{describe_duration(self.stalled_for)} ago): {self.reason}"
        )


class HeldBackTracker:
    """Tracks one source's held-back data across triggers.

    Lives in the driver-side reader process; :meth:`observe` is called once per trigger.

    Parameters
    ----------
    clock
        Returns the current time in epoch seconds.
    warn_after
        Seconds the oldest unit is held back before :meth:`warning_due` says to warn.
    warn_every
        The least number of seconds between two warnings.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        warn_after: float = WARN_AFTER,
        warn_every: float = WARN_EVERY,
    ) -> None:
        if warn_after < 0 or warn_every <= 0:
            raise UsageError(
                f"warn_after must be >= 0 and warn_every > 0, got {warn_after} and {warn_every}"
            )
        self._clock = clock
        self._warn_after = warn_after
        self._warn_every = warn_every
        self._warned_at: float | None = None
        self.current: HeldBack | None = None
        """What the last trigger held back (None: nothing)."""

    def observe(self, changes: int, units: int, oldest: str | None, reason: str | None) -> None:
        """Record what the source holds back at this trigger (driver, once per trigger).

        Nothing is held back when there are no changes, no units and no reason.

        Parameters
        ----------
        changes
            Change events held back.
        units
            Open units holding them.
        oldest
            The oldest open unit's identity, if the connector names it.
        reason
            Why, in words (None: the connector gave no reason).
        """
        if changes < 0 or units < 0:
            raise UsageError(f"held changes and units must be >= 0, got {changes} and {units}")
        now = self._clock()
        if changes == 0 and units == 0 and reason is None:
            self.current = None
            return
        text = reason or f"{changes} change(s) read are in no complete unit yet"
        last = self.current
        if last is None or last.oldest != oldest:
            since = progressed_at = now
        else:
            since = last.since
            grew = changes > last.changes and units <= last.units
            progressed_at = now if grew else last.progressed_at
        self.current = HeldBack(changes, units, oldest, text, since, progressed_at, now)

    def warning_due(self) -> bool:
        """True when the log should warn now; the warning is then counted as given (driver).

        Rule: only while the oldest unit has been held back longer than ``warn_after``, and at
        most once every ``warn_every`` seconds.
        """
        held = self.current
        if held is None or held.held_for <= self._warn_after:
            return False
        if self._warned_at is not None and held.at - self._warned_at < self._warn_every:
            return False
        self._warned_at = held.at
        return True
