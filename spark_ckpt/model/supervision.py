"""The rules a supervised query is held to, apart from Spark (DESIGN.md §5).

:class:`SupervisionRules` turns what the supervisor observes (a completed checkpoint, a trigger
that is still running, the sources' declines, a failed hook, a failed query) into counted or
ignored failures and, through the :class:`~spark_ckpt.model.failures.CheckpointFailureManager`,
into a failover request with its reason chain. It records every failure and decline as a history
event through a callback and reads time from an injected clock, so each rule is tested on its own
without Spark or waiting (``tests/unit/test_supervision_rules.py``). The supervisor
(:mod:`spark_ckpt.spark.supervisor`) is the glue that polls the query and acts on the failover.

Runs on the driver: the supervisor's thread polls about once a second; the listener's threads
report completed checkpoints and publish failures. Every method is thread-safe.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from spark_ckpt.model.events import DeclineEvent, FailureEvent, HistoryEvent
from spark_ckpt.model.failures import (
    CheckpointFailure,
    CheckpointFailureManager,
    FailureReason,
    is_io_error,
)

__all__ = ["SupervisionRules"]


class SupervisionRules:
    """Failure accounting of one supervised query across its attempts.

    Parameters
    ----------
    tolerable_failed_checkpoints
        Consecutive counted failures tolerated before failover.
    tolerable_failure_timeout
        Seconds without a completed checkpoint while a source holds data back before failover.
    checkpoint_timeout
        Seconds a batch may run before it counts as an expired checkpoint.
    record
        Appends a history event (failures and declines, once each).
    clock
        Monotonic seconds.
    """

    def __init__(
        self,
        tolerable_failed_checkpoints: int,
        tolerable_failure_timeout: float,
        checkpoint_timeout: float,
        record: Callable[[HistoryEvent], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.checkpoint_timeout = checkpoint_timeout
        self._record = record
        self._clock = clock
        self._lock = threading.RLock()
        self._failover: list[CheckpointFailure] | None = None
        self.failures = CheckpointFailureManager(
            tolerable_failed_checkpoints, tolerable_failure_timeout, self.request_failover, clock
        )
        self._running: tuple[int, float] | None = None  # (batch id, seen running since)
        self._expired: set[int] = set()
        self._declines: set[tuple[int, str, str]] = set()  # recorded already
        self._hook_abort: CheckpointFailure | None = None
        self._hard_since: tuple[int, float] | None = None  # (checkpoint, first hard decline)

    # -- what the supervisor observes ------------------------------------------------------

    def attempt_started(self) -> None:
        """A new attempt starts: no batch is running and no hook has aborted one."""
        with self._lock:
            self._running = None
            self._hook_abort = None

    def checkpoint_completed(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed: a newer one resets the count."""
        with self._lock:
            self.failures.handle_completed(checkpoint_id)

    def fail(self, reason: FailureReason, checkpoint_id: int | None, message: str) -> None:
        """Record a failure in the history and hand it to the failure manager."""
        self._record(FailureEvent(checkpoint_id, reason.name, message))
        with self._lock:
            self.failures.handle_failure(reason, checkpoint_id, message)

    def trigger_seen(self, active: bool, batch_id: int) -> None:
        """A look at the query: is a trigger running, and which batch would it be.

        Rule: a batch seen running for longer than ``checkpoint_timeout`` expires, once; an idle
        trigger never expires, and a new batch starts its own clock.
        """
        now = self._clock()
        with self._lock:
            if not active:
                self._running = None
                return
            if self._running is None or self._running[0] != batch_id:
                self._running = (batch_id, now)
                return
            if now - self._running[1] <= self.checkpoint_timeout or batch_id in self._expired:
                return
            self._expired.add(batch_id)
        self.fail(
            FailureReason.CHECKPOINT_EXPIRED,
            batch_id,
            f"batch {batch_id} ran longer than checkpointTimeout={self.checkpoint_timeout:g}s",
        )

    def declines_seen(
        self,
        declines: Iterable[tuple[str, str]],
        next_checkpoint: int,
        *,
        held_back: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """The sources' current declines, as ``(kind, reason)``, charged to ``next_checkpoint``.

        ``held_back`` maps a decline's reason to what its source held back (``heldBack``); it
        is recorded with the decline, so the history shows it while no checkpoint completes.

        Rules: each decline is recorded once per checkpoint attempt; a hard one is a counted
        failure of that attempt. A checkpoint that stays declined hard is attempted again every
        ``checkpointTimeout`` (Flink expires a checkpoint that long and triggers the next), so
        a source that keeps declining exhausts ``tolerableFailedCheckpoints`` in time. Any
        decline means data is held back, which the failure manager times out after
        ``tolerableFailureTimeout``; no decline means nothing is held back (an idle source is
        never a failure).
        """
        current = list(declines)
        now = self._clock()
        with self._lock:
            if not any(kind == "hard" for kind, _ in current):
                self._hard_since = None
            elif self._hard_since is None or self._hard_since[0] != next_checkpoint:
                self._hard_since = (next_checkpoint, now)
            since = None if self._hard_since is None else self._hard_since[1]
        for kind, reason in current:
            held = None if held_back is None else held_back.get(reason)
            attempt = 0
            if kind == "hard" and since is not None and math.isfinite(self.checkpoint_timeout):
                attempt = int((now - since) // self.checkpoint_timeout)
            if attempt:
                reason = (
                    f"{reason} (still declined {attempt} x checkpointTimeout="
                    f"{self.checkpoint_timeout:g}s later)"
                )
            with self._lock:
                new = (next_checkpoint, kind, reason) not in self._declines
                self._declines.add((next_checkpoint, kind, reason))
            if new:
                self._record(DeclineEvent(next_checkpoint, kind, reason, held))
            # A soft decline is an ignored failure (the DeclineEvent is its record); a hard one
            # counts toward tolerableFailedCheckpoints.
            declined = (
                FailureReason.SOURCE_DECLINED_HARD
                if kind == "hard"
                else FailureReason.SOURCE_DECLINED_SOFT
            )
            with self._lock:
                self.failures.handle_failure(declined, next_checkpoint, reason, attempt)
        with self._lock:
            self.failures.handle_holding(bool(current))

    def hook_failed(self, checkpoint_id: int, io: bool, detail: str, message: str) -> None:
        """A checkpoint hook failed, so the sink aborts checkpoint ``checkpoint_id``.

        Rule: it is the cause of the failure that follows (Spark aborts a checkpoint only by
        failing its batch); I/O failures are counted, a failing hook is not.
        """
        reason = FailureReason.HOOK_IO_FAILED if io else FailureReason.HOOK_TRIGGER_FAILED
        with self._lock:
            self._hook_abort = CheckpointFailure(checkpoint_id, reason, detail, self._clock())
        self.fail(reason, checkpoint_id, message)

    def query_failed(self, message: str) -> list[CheckpointFailure]:
        """The attempt's query failed: fail over at once; return the chain that led here.

        Rules: a query that failed reading or writing storage is an I/O error (counted) before
        it is a failed query (failover); a hook that aborted the batch is named first.
        """
        earlier: list[CheckpointFailure] = []
        if is_io_error(message):
            self.fail(FailureReason.IO_ERROR, None, message)
            earlier = self.take_failover() or []  # over the limit already: keep its chain
        self.fail(FailureReason.QUERY_FAILED, None, message)
        chain = self.take_failover() or []
        chain = [*earlier, *(f for f in chain if f not in earlier)]
        with self._lock:
            abort = self._hook_abort
        if abort is not None and abort not in chain:
            chain.insert(0, abort)
        return chain

    def user_stopped(self) -> None:
        """The user stopped the query: recorded, ignored by the count (Flink's rule)."""
        self.fail(FailureReason.QUERY_STOPPED_BY_USER, None, "stopped by the user")

    # -- what the supervisor acts on ---------------------------------------------------------

    def request_failover(self, chain: list[CheckpointFailure]) -> None:
        """Ask for a failover with ``chain`` as its cause (the failure manager's callback)."""
        with self._lock:
            self._failover = chain

    def take_failover(self) -> list[CheckpointFailure] | None:
        """The pending failover's chain, once; None when none is pending."""
        with self._lock:
            chain, self._failover = self._failover, None
        return chain
