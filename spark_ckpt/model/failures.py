"""Checkpoint failure reasons and the failure manager (Flink's ``CheckpointFailureManager``).

Pure logic, no Spark: every reason is classified explicitly as counted or ignored (or as an
immediate failover), each checkpoint counts at most once, failures of checkpoints at or before the
last completed one are ignored, and a newer completed checkpoint resets the count. Over
``tolerable_failed_checkpoints`` consecutive counted failures, or past the tolerable failure
*timeout* while a source holds data back (FLIP-170), the injected failover action runs.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from spark_ckpt.errors import UsageError

__all__ = [
    "CheckpointFailure",
    "CheckpointFailureManager",
    "FailureHandling",
    "FailureReason",
    "is_io_error",
]


class FailureHandling(enum.Enum):
    """What a failure reason does to the count."""

    COUNTED = "counted"
    IGNORED = "ignored"
    FAILOVER = "failover"  # fail over at once, whatever the count


class FailureReason(enum.Enum):
    """Why a checkpoint (a micro-batch) failed. DESIGN.md §5."""

    SOURCE_DECLINED_SOFT = "source declined (soft)"
    SOURCE_DECLINED_HARD = "source declined (hard)"
    CHECKPOINT_EXPIRED = "checkpoint expired"
    PUBLISH_FAILED = "publish failed"
    HOOK_TRIGGER_FAILED = "checkpoint hook failed"
    HOOK_IO_FAILED = "checkpoint hook I/O error"
    IO_ERROR = "I/O error"
    QUERY_FAILED = "query failed"
    QUERY_STOPPED_BY_USER = "query stopped by the user"

    @property
    def handling(self) -> FailureHandling:
        """How this reason is handled; every reason must be in the table."""
        try:
            return _HANDLING[self]
        except KeyError:
            raise UsageError(f"failure reason {self.name} is not classified") from None


# Flink: declined, expired, I/O and finalize (commit) failures count; trigger-side and shutdown
# reasons do not. A hook failure counts only when it is an I/O error.
_HANDLING: dict[FailureReason, FailureHandling] = {
    FailureReason.SOURCE_DECLINED_SOFT: FailureHandling.IGNORED,
    FailureReason.SOURCE_DECLINED_HARD: FailureHandling.COUNTED,
    FailureReason.CHECKPOINT_EXPIRED: FailureHandling.COUNTED,
    FailureReason.PUBLISH_FAILED: FailureHandling.COUNTED,
    FailureReason.HOOK_TRIGGER_FAILED: FailureHandling.IGNORED,
    FailureReason.HOOK_IO_FAILED: FailureHandling.COUNTED,
    FailureReason.IO_ERROR: FailureHandling.COUNTED,
    FailureReason.QUERY_FAILED: FailureHandling.FAILOVER,
    FailureReason.QUERY_STOPPED_BY_USER: FailureHandling.IGNORED,
}


_IO_MARKERS = (
    "java.io.IOException",
    "java.io.FileNotFoundException",
    "java.nio.file.",
    "org.apache.hadoop.fs.",
    "S3Exception",
    "SdkClientException",
    "AccessDeniedException",
    "StorageError",
    "CheckpointLocationError",
)
"""What a failed query's error says when it failed reading or writing storage: Hadoop's and the
AWS SDK's exceptions on the JVM side, spark-ckpt's storage errors on the Python side."""


def is_io_error(message: str) -> bool:
    """True when a failed query's error (its message and stack trace) is an I/O error."""
    return any(marker in message for marker in _IO_MARKERS)


@dataclass(frozen=True)
class CheckpointFailure:
    """One failed checkpoint, as the manager records it.

    Attributes
    ----------
    checkpoint_id
        The batch id, or None when the failure is not tied to one checkpoint.
    reason
        Why it failed.
    message
        Details.
    at
        When it was reported (clock seconds).
    attempt
        Which attempt at the checkpoint failed (0: the first). A checkpoint a source keeps
        declining is attempted again every ``checkpointTimeout``, as Flink triggers a new
        checkpoint after one failed.
    """

    checkpoint_id: int | None
    reason: FailureReason
    message: str
    at: float
    attempt: int = 0

    def __str__(self) -> str:
        where = f"checkpoint {self.checkpoint_id}" if self.checkpoint_id is not None else "query"
        if self.attempt:
            where += f" (attempt {self.attempt + 1})"
        return f"{where}: {self.reason.value}" + (f" ({self.message})" if self.message else "")


class CheckpointFailureManager:
    """Counts checkpoint failures of one query and decides when to fail over (driver).

    Parameters
    ----------
    tolerable_failed_checkpoints
        Consecutive counted failures tolerated; one more triggers failover (>= 0).
    tolerable_failure_timeout
        Seconds without a completed checkpoint while a source holds data back before failover
        (``math.inf``: never).
    failover
        Called once per failover with the failures that led to it (oldest first).
    clock
        Returns the current time in seconds.
    """

    def __init__(
        self,
        tolerable_failed_checkpoints: int,
        tolerable_failure_timeout: float,
        failover: Callable[[list[CheckpointFailure]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if tolerable_failed_checkpoints < 0:
            raise UsageError(
                f"tolerable_failed_checkpoints must be >= 0, got {tolerable_failed_checkpoints}"
            )
        if not tolerable_failure_timeout > 0:
            raise UsageError(
                f"tolerable_failure_timeout must be > 0 seconds, got {tolerable_failure_timeout}"
            )
        self._tolerable = tolerable_failed_checkpoints
        self._timeout = tolerable_failure_timeout
        self._failover = failover
        self._clock = clock
        self._counted_ids: set[tuple[int, int]] = set()  # (checkpoint id, attempt)
        self._chain: list[CheckpointFailure] = []
        self._last_completed: int | None = None
        self._progress_at = clock()
        self._holding_since: float | None = None

    @property
    def failure_count(self) -> int:
        """Consecutive counted failures since the last newer completed checkpoint."""
        return len(self._chain)

    @property
    def last_completed(self) -> int | None:
        """The newest completed checkpoint id seen."""
        return self._last_completed

    def handle_completed(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed; a newer one resets the count."""
        if self._last_completed is None or checkpoint_id > self._last_completed:
            self._last_completed = checkpoint_id
            self._counted_ids.clear()
            self._chain.clear()
            self._progress_at = self._clock()

    def handle_failure(
        self,
        reason: FailureReason,
        checkpoint_id: int | None = None,
        message: str = "",
        attempt: int = 0,
    ) -> bool:
        """Record a failure; return True when it triggered failover.

        Ignored reasons, failures of checkpoints at or before the last completed one, and a second
        counted failure of the same attempt at a checkpoint change nothing.
        """
        handling = reason.handling
        failure = CheckpointFailure(checkpoint_id, reason, message, self._clock(), attempt)
        if handling is FailureHandling.FAILOVER:
            self._fail([*self._chain, failure])
            return True
        if handling is FailureHandling.IGNORED:
            return False
        if (
            checkpoint_id is not None
            and self._last_completed is not None
            and checkpoint_id <= self._last_completed
        ):
            return False
        if checkpoint_id is not None:
            if (checkpoint_id, attempt) in self._counted_ids:
                return False
            self._counted_ids.add((checkpoint_id, attempt))
        self._chain.append(failure)
        if len(self._chain) > self._tolerable:
            self._fail(list(self._chain))
            return True
        return False

    def handle_holding(self, holding_back: bool) -> bool:
        """Report whether a source currently holds data back; return True on timeout failover.

        Called periodically. Idle time (nothing held back) never counts: the timeout runs from
        the later of the last completed checkpoint and the moment data started being held back.
        """
        now = self._clock()
        if not holding_back:
            self._holding_since = None
            return False
        if self._holding_since is None:
            self._holding_since = now
        if math.isinf(self._timeout):
            return False
        waited = now - max(self._progress_at, self._holding_since)
        if waited > self._timeout:
            failure = CheckpointFailure(
                None,
                FailureReason.SOURCE_DECLINED_SOFT,
                f"no checkpoint completed for {waited:.1f}s while a source held data back "
                f"(tolerableFailureTimeout={self._timeout:g}s)",
                now,
            )
            self._fail([*self._chain, failure])
            return True
        return False

    def _fail(self, chain: list[CheckpointFailure]) -> None:
        self._counted_ids.clear()
        self._chain.clear()
        self._progress_at = self._clock()
        self._holding_since = None
        self._failover(chain)
