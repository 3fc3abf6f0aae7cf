"""FLIP-170 availability values."""

from __future__ import annotations

import pytest

from spark_ckpt import AVAILABLE, AvailabilityStatus, CheckpointAvailabilityProvider
from spark_ckpt import SnapshotAvailability as SA


def test_available_is_available_and_carries_no_message() -> None:
    """AVAILABLE says yes and has nothing to explain."""
    assert AVAILABLE.is_available
    assert not AVAILABLE.is_hard
    assert str(AVAILABLE) == "AVAILABLE"


def test_soft_and_hard_failures_carry_their_reason() -> None:
    """Each failure kind keeps its message and severity."""
    soft = SA.soft_failure("inside transaction 7")
    hard = SA.hard_failure("slot dropped")
    assert (soft.status, soft.is_available, soft.is_hard) == (
        AvailabilityStatus.SOFT_FAILURE,
        False,
        False,
    )
    assert (hard.status, hard.is_hard) == (AvailabilityStatus.HARD_FAILURE, True)
    assert str(soft) == "SOFT_FAILURE: inside transaction 7"
    assert str(hard) == "HARD_FAILURE: slot dropped"


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (AvailabilityStatus.SOFT_FAILURE, ""),  # a refusal must say why
        (AvailabilityStatus.HARD_FAILURE, ""),
        (AvailabilityStatus.AVAILABLE, "but why?"),  # AVAILABLE has nothing to explain
    ],
)
def test_inconsistent_values_are_rejected(status: AvailabilityStatus, message: str) -> None:
    """A failure without a reason, or AVAILABLE with one, cannot be built."""
    with pytest.raises(ValueError, match=r"AVAILABLE|must say why"):
        SA(status, message)


def test_provider_is_abstract() -> None:
    """A provider must implement is_snapshot_available."""

    class Always(CheckpointAvailabilityProvider):
        def is_snapshot_available(self, checkpoint_id: int) -> SA:
            return AVAILABLE

    with pytest.raises(TypeError):
        CheckpointAvailabilityProvider()  # type: ignore[abstract]
    assert Always().is_snapshot_available(3) is AVAILABLE
