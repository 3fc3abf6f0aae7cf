"""CheckpointFailureManager: one rule per test, like Flink's CheckpointFailureManagerTest."""

from __future__ import annotations

import math

import pytest

from spark_ckpt.model.failures import (
    CheckpointFailure,
    CheckpointFailureManager,
    FailureHandling,
    FailureReason,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.failovers: list[list[CheckpointFailure]] = []

    def __call__(self, chain: list[CheckpointFailure]) -> None:
        self.failovers.append(chain)


def manager(
    tolerable: int = 0, timeout: float = math.inf
) -> tuple[CheckpointFailureManager, Recorder, Clock]:
    recorder, clock = Recorder(), Clock()
    return CheckpointFailureManager(tolerable, timeout, recorder, clock), recorder, clock


def test_every_reason_is_classified() -> None:
    """Walks every reason, so a new one cannot slip in unclassified."""
    expected = {
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
    assert {reason: reason.handling for reason in FailureReason} == expected


def test_tolerable_count_is_exceeded_by_one_more_failure() -> None:
    """With 2 tolerated, the third consecutive counted failure fails over."""
    failures, recorder, _ = manager(tolerable=2)
    assert not failures.handle_failure(FailureReason.CHECKPOINT_EXPIRED, 1)
    assert not failures.handle_failure(FailureReason.SOURCE_DECLINED_HARD, 2)
    assert failures.handle_failure(FailureReason.IO_ERROR, 3)
    assert [f.checkpoint_id for f in recorder.failovers[0]] == [1, 2, 3]


def test_ignored_reasons_never_count() -> None:
    """Soft declines, trigger-side hook failures and user stops are not counted."""
    failures, recorder, _ = manager(tolerable=0)
    for checkpoint, reason in enumerate(
        [
            FailureReason.SOURCE_DECLINED_SOFT,
            FailureReason.HOOK_TRIGGER_FAILED,
            FailureReason.QUERY_STOPPED_BY_USER,
        ]
    ):
        assert not failures.handle_failure(reason, checkpoint)
    assert failures.failure_count == 0
    assert recorder.failovers == []


def test_each_checkpoint_counts_once() -> None:
    """Two counted failures of the same checkpoint count as one."""
    failures, recorder, _ = manager(tolerable=1)
    failures.handle_failure(FailureReason.CHECKPOINT_EXPIRED, 5)
    failures.handle_failure(FailureReason.PUBLISH_FAILED, 5)
    assert failures.failure_count == 1
    assert recorder.failovers == []


def test_ignores_past_checkpoints() -> None:
    """Failures of checkpoints at or before the last completed one are ignored."""
    failures, recorder, _ = manager(tolerable=0)
    failures.handle_completed(10)
    assert not failures.handle_failure(FailureReason.CHECKPOINT_EXPIRED, 10)
    assert not failures.handle_failure(FailureReason.CHECKPOINT_EXPIRED, 7)
    assert recorder.failovers == []


def test_newer_completion_resets_the_count() -> None:
    """A newer completed checkpoint resets; an older one does not."""
    failures, _, _ = manager(tolerable=5)
    failures.handle_completed(3)
    failures.handle_failure(FailureReason.IO_ERROR, 4)
    failures.handle_failure(FailureReason.IO_ERROR, 5)
    failures.handle_completed(2)
    assert failures.failure_count == 2
    failures.handle_completed(6)
    assert failures.failure_count == 0


def test_query_failure_fails_over_at_once() -> None:
    """A failed query fails over whatever the tolerance, with the chain so far."""
    failures, recorder, _ = manager(tolerable=10)
    failures.handle_failure(FailureReason.IO_ERROR, 1)
    assert failures.handle_failure(FailureReason.QUERY_FAILED, None, "boom")
    assert [f.reason for f in recorder.failovers[0]] == [
        FailureReason.IO_ERROR,
        FailureReason.QUERY_FAILED,
    ]


def test_failover_starts_a_new_count() -> None:
    """After a failover the count starts from zero."""
    failures, recorder, _ = manager(tolerable=0)
    failures.handle_failure(FailureReason.IO_ERROR, 1)
    assert failures.failure_count == 0
    failures.handle_failure(FailureReason.IO_ERROR, 2)
    assert len(recorder.failovers) == 2


def test_holding_data_back_past_the_timeout_fails_over() -> None:
    """No completed checkpoint for longer than the timeout while data is held back."""
    failures, recorder, clock = manager(timeout=30)
    clock.now = 5
    assert not failures.handle_holding(True)
    clock.now = 35
    assert not failures.handle_holding(True)
    clock.now = 35.5
    assert failures.handle_holding(True)
    assert "tolerableFailureTimeout=30s" in recorder.failovers[0][-1].message


def test_idle_time_never_counts_toward_the_timeout() -> None:
    """Hours of idleness followed by held-back data start the timeout afresh."""
    failures, recorder, clock = manager(timeout=30)
    clock.now = 3600
    assert not failures.handle_holding(False)
    assert not failures.handle_holding(True)
    clock.now = 3620
    assert not failures.handle_holding(True)
    assert recorder.failovers == []


def test_completed_checkpoint_restarts_the_timeout() -> None:
    """Progress while holding some data back postpones the timeout."""
    failures, recorder, clock = manager(timeout=30)
    failures.handle_holding(True)
    clock.now = 25
    failures.handle_completed(1)
    clock.now = 50
    assert not failures.handle_holding(True)
    assert recorder.failovers == []


@pytest.mark.parametrize(("tolerable", "timeout"), [(-1, math.inf), (0, 0.0), (0, -5.0)])
def test_invalid_arguments_are_rejected(tolerable: int, timeout: float) -> None:
    """The constructor validates its arguments."""
    with pytest.raises(ValueError, match="must be"):
        CheckpointFailureManager(tolerable, timeout, Recorder())
