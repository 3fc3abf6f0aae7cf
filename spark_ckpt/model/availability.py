"""FLIP-170 checkpoint availability: whether a checkpoint may be taken at a given point.

Flink's FLIP-170 proposed ``CheckpointAvailabilityProvider.isSnapshotAvailable(checkpointId)``
so a source can refuse a checkpoint that would fall somewhere it cannot be restored from (inside
a transaction, inside a snapshot phase that cannot resume). Flink never shipped it; this module is
that API in Python, with no Spark import, so it can be used and tested without a JVM.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass

from spark_ckpt.errors import UsageError

__all__ = [
    "AVAILABLE",
    "AvailabilityStatus",
    "CheckpointAvailabilityProvider",
    "SnapshotAvailability",
]


class AvailabilityStatus(enum.Enum):
    """Whether a snapshot can be taken, and if not, how serious the refusal is."""

    AVAILABLE = "available"
    """The snapshot can be taken now."""
    SOFT_FAILURE = "soft"
    """Not now, but it is expected to become available: retry later; not counted as a failure."""
    HARD_FAILURE = "hard"
    """The snapshot is refused for a reason that will not resolve itself: a counted failure."""


@dataclass(frozen=True)
class SnapshotAvailability:
    """The answer to "may checkpoint N be taken here?", with the reason when it may not.

    Use :data:`AVAILABLE`, :meth:`soft_failure` and :meth:`hard_failure` to build one.

    Attributes
    ----------
    status
        Available, soft failure or hard failure.
    message
        Why the snapshot is not available (empty when it is).
    """

    status: AvailabilityStatus
    message: str = ""

    def __post_init__(self) -> None:
        if self.status is AvailabilityStatus.AVAILABLE and self.message:
            raise UsageError("an AVAILABLE snapshot carries no failure message")
        if self.status is not AvailabilityStatus.AVAILABLE and not self.message:
            raise UsageError(f"a {self.status.name} must say why the snapshot is unavailable")

    @classmethod
    def soft_failure(cls, message: str) -> SnapshotAvailability:
        """Refuse for now: the condition is expected to clear by itself (not counted)."""
        return cls(AvailabilityStatus.SOFT_FAILURE, message)

    @classmethod
    def hard_failure(cls, message: str) -> SnapshotAvailability:
        """Refuse for a reason that will not clear by itself (counted as a checkpoint failure)."""
        return cls(AvailabilityStatus.HARD_FAILURE, message)

    @property
    def is_available(self) -> bool:
        """True when the snapshot may be taken."""
        return self.status is AvailabilityStatus.AVAILABLE

    @property
    def is_hard(self) -> bool:
        """True for a hard failure."""
        return self.status is AvailabilityStatus.HARD_FAILURE

    def __str__(self) -> str:
        if self.is_available:
            return "AVAILABLE"
        return f"{self.status.name}: {self.message}"


AVAILABLE = SnapshotAvailability(AvailabilityStatus.AVAILABLE)
"""The snapshot can be taken."""


class CheckpointAvailabilityProvider(abc.ABC):
    """Something that can refuse a checkpoint (FLIP-170).

    Sources implement it. Before a checkpoint is taken at the source's proposed position, the
    source is asked whether its state there can be snapshotted and later restored.
    """

    @abc.abstractmethod
    def is_snapshot_available(self, checkpoint_id: int) -> SnapshotAvailability:
        """Say whether checkpoint ``checkpoint_id`` may be taken at the proposed position.

        Parameters
        ----------
        checkpoint_id
            The checkpoint being proposed.

        Returns
        -------
        SnapshotAvailability
            :data:`AVAILABLE`, or a soft or hard failure carrying its reason.
        """
