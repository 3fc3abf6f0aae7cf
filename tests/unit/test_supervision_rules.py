"""The supervision rules, one rule per test, with a fake clock and no Spark.

In the style of Flink's ``CheckpointFailureManagerTest``: each test is one scenario named after
the rule it holds the supervisor to (DESIGN.md §5).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from spark_ckpt.model.events import DeclineEvent, FailureEvent, HistoryEvent
from spark_ckpt.model.failures import FailureReason
from spark_ckpt.model.supervision import SupervisionRules


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def history() -> list[HistoryEvent]:
    return []


def rules(
    clock: FakeClock,
    history: list[HistoryEvent],
    tolerable: int = 0,
    timeout: float = math.inf,
    checkpoint_timeout: float = 10.0,
) -> SupervisionRules:
    return SupervisionRules(tolerable, timeout, checkpoint_timeout, history.append, clock)


def failures(history: list[HistoryEvent]) -> list[tuple[int | None, str]]:
    return [(e.checkpoint, e.reason) for e in history if isinstance(e, FailureEvent)]


def test_a_batch_running_past_the_checkpoint_timeout_expires_once(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """Polled many times past the timeout, the batch is one counted, recorded failure."""
    supervision = rules(clock, history, tolerable=5)
    supervision.trigger_seen(True, 3)
    for _ in range(5):
        clock.now += 11
        supervision.trigger_seen(True, 3)
    assert failures(history) == [(3, "CHECKPOINT_EXPIRED")]
    assert supervision.failures.failure_count == 1


def test_a_batch_within_the_checkpoint_timeout_does_not_expire(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """Exactly at the timeout is still in time."""
    supervision = rules(clock, history)
    supervision.trigger_seen(True, 0)
    clock.now += 10
    supervision.trigger_seen(True, 0)
    assert failures(history) == []


def test_each_new_batch_starts_its_own_expiry_clock(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """Batches that each run under the timeout never expire, however long the run."""
    supervision = rules(clock, history)
    for batch in range(10):
        supervision.trigger_seen(True, batch)
        clock.now += 6
    assert failures(history) == []


def test_an_idle_trigger_never_expires(clock: FakeClock, history: list[HistoryEvent]) -> None:
    """Time with no trigger running does not count toward a batch's expiry."""
    supervision = rules(clock, history)
    supervision.trigger_seen(True, 0)
    clock.now += 8
    supervision.trigger_seen(False, 1)
    clock.now += 8
    supervision.trigger_seen(True, 1)
    clock.now += 8
    supervision.trigger_seen(True, 1)
    assert failures(history) == []


def test_an_expired_checkpoint_over_the_limit_requests_failover(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """With tolerableFailedCheckpoints=0 the first counted failure fails over."""
    supervision = rules(clock, history)
    supervision.trigger_seen(True, 2)
    clock.now += 11
    supervision.trigger_seen(True, 2)
    chain = supervision.take_failover()
    assert chain is not None
    assert [f.reason for f in chain] == [FailureReason.CHECKPOINT_EXPIRED]
    assert supervision.take_failover() is None  # handed out once


def test_hard_declines_count_once_per_checkpoint(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """The same hard decline seen on many polls is one counted failure, recorded once."""
    supervision = rules(clock, history, tolerable=1)
    for _ in range(3):
        supervision.declines_seen([("hard", "T1 never ends")], 4)
    assert supervision.failures.failure_count == 1
    assert supervision.take_failover() is None
    assert [e for e in history if isinstance(e, DeclineEvent)] == [
        DeclineEvent(4, "hard", "T1 never ends")
    ]


def test_hard_declines_of_consecutive_checkpoints_fail_over_past_the_limit(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """tolerableFailedCheckpoints=1: the second checkpoint declined hard fails over."""
    supervision = rules(clock, history, tolerable=1)
    supervision.declines_seen([("hard", "r")], 4)
    supervision.declines_seen([("hard", "r")], 5)
    chain = supervision.take_failover()
    assert chain is not None
    assert [(f.checkpoint_id, f.reason) for f in chain] == [
        (4, FailureReason.SOURCE_DECLINED_HARD),
        (5, FailureReason.SOURCE_DECLINED_HARD),
    ]


def test_soft_declines_are_recorded_but_never_counted(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """A soft decline is history, not a failure."""
    supervision = rules(clock, history)
    supervision.declines_seen([("soft", "T1 waits for its END")], 0)
    assert supervision.failures.failure_count == 0
    assert supervision.take_failover() is None
    assert history == [DeclineEvent(0, "soft", "T1 waits for its END")]


def test_a_decline_is_recorded_with_what_its_source_holds_back(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """The source's heldBack report travels with its decline into the history."""
    supervision = rules(clock, history)
    held = {"changes": 2, "transactions": 1, "oldest": "transaction 'T1'", "reason": "T1 waits"}
    supervision.declines_seen([("soft", "T1 waits")], 0, held_back={"T1 waits": held})
    supervision.declines_seen([("soft", "other")], 1, held_back={"T1 waits": held})
    assert history == [
        DeclineEvent(0, "soft", "T1 waits", held),
        DeclineEvent(1, "soft", "other"),
    ]


def test_holding_data_back_past_the_tolerable_failure_timeout_fails_over(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """Declines that last longer than tolerableFailureTimeout, with no checkpoint, fail over."""
    supervision = rules(clock, history, timeout=30)
    supervision.declines_seen([("soft", "waiting")], 0)
    clock.now += 31
    supervision.declines_seen([("soft", "waiting")], 0)
    chain = supervision.take_failover()
    assert chain is not None
    assert chain[-1].reason is FailureReason.SOURCE_DECLINED_SOFT
    assert "tolerableFailureTimeout=30s" in chain[-1].message


def test_an_idle_source_never_times_out(clock: FakeClock, history: list[HistoryEvent]) -> None:
    """No decline means nothing is held back: waiting for data is not a failure."""
    supervision = rules(clock, history, timeout=30)
    for _ in range(5):
        supervision.declines_seen([], 0)
        clock.now += 31
    assert supervision.take_failover() is None


def test_a_completed_checkpoint_resets_the_count(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """A newer completed checkpoint forgives earlier counted failures."""
    supervision = rules(clock, history, tolerable=1)
    supervision.fail(FailureReason.PUBLISH_FAILED, 3, "store down")
    supervision.checkpoint_completed(3)
    supervision.fail(FailureReason.PUBLISH_FAILED, 4, "store down")
    assert supervision.failures.failure_count == 1
    assert supervision.take_failover() is None


def test_a_failed_query_fails_over_at_once_with_the_chain_so_far(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """QUERY_FAILED fails over whatever the limit, after the counted failures before it."""
    supervision = rules(clock, history, tolerable=5)
    supervision.fail(FailureReason.IO_ERROR, 2, "disk")
    chain = supervision.query_failed("boom")
    assert [f.reason for f in chain] == [FailureReason.IO_ERROR, FailureReason.QUERY_FAILED]
    assert failures(history) == [(2, "IO_ERROR"), (None, "QUERY_FAILED")]


def test_a_hook_that_aborted_the_batch_is_named_first(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """A failing hook is not counted, but it is why the batch, and so the query, failed."""
    supervision = rules(clock, history)
    supervision.hook_failed(6, io=False, detail="hook raised", message="hook 'h' at 6")
    assert supervision.take_failover() is None  # HOOK_TRIGGER_FAILED is ignored
    chain = supervision.query_failed("batch 6 failed")
    assert [f.reason for f in chain] == [
        FailureReason.HOOK_TRIGGER_FAILED,
        FailureReason.QUERY_FAILED,
    ]
    assert chain[0].checkpoint_id == 6


def test_a_hook_io_failure_is_counted(clock: FakeClock, history: list[HistoryEvent]) -> None:
    """Storing a hook's bytes failed: an I/O failure of the checkpoint, counted."""
    supervision = rules(clock, history)
    supervision.hook_failed(6, io=True, detail="disk full", message="hook 'h' at 6")
    chain = supervision.take_failover()
    assert chain is not None
    assert [f.reason for f in chain] == [FailureReason.HOOK_IO_FAILED]


def test_a_new_attempt_forgets_the_running_batch_and_the_hook_abort(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """After a restart, the old attempt's batch clock and hook failure no longer apply."""
    supervision = rules(clock, history, tolerable=5)
    supervision.trigger_seen(True, 7)
    supervision.hook_failed(7, io=False, detail="raised", message="m")
    clock.now += 8
    supervision.attempt_started()
    supervision.trigger_seen(True, 7)
    clock.now += 8
    supervision.trigger_seen(True, 7)
    assert [f for f in failures(history) if f[1] == "CHECKPOINT_EXPIRED"] == []
    chain = supervision.query_failed("later failure")
    assert [f.reason for f in chain] == [FailureReason.QUERY_FAILED]


def test_a_query_that_failed_on_storage_is_an_io_error_then_a_failover(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """DESIGN §5: an I/O error is counted; the dead query then fails over, naming both."""
    supervision = rules(clock, history, tolerable=3)
    message = "org.apache.hadoop.fs.s3a.AWSBadRequestException: ... java.io.IOException: gone"
    chain = supervision.query_failed(message)
    assert [f.reason for f in chain] == [FailureReason.IO_ERROR, FailureReason.QUERY_FAILED]
    assert failures(history) == [(None, "IO_ERROR"), (None, "QUERY_FAILED")]


def test_an_io_error_over_the_limit_keeps_its_place_in_the_chain(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    supervision = rules(clock, history, tolerable=0)
    chain = supervision.query_failed("spark_ckpt.errors.StorageError: cannot write s3://b/t")
    assert [f.reason for f in chain] == [FailureReason.IO_ERROR, FailureReason.QUERY_FAILED]


def test_any_other_failure_of_the_query_is_a_failed_query_only(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    supervision = rules(clock, history, tolerable=3)
    chain = supervision.query_failed("ZeroDivisionError: division by zero")
    assert [f.reason for f in chain] == [FailureReason.QUERY_FAILED]


def test_a_stop_by_the_user_is_recorded_and_not_counted(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    supervision = rules(clock, history, tolerable=0)
    supervision.user_stopped()
    assert failures(history) == [(None, "QUERY_STOPPED_BY_USER")]
    assert supervision.failures.failure_count == 0
    assert supervision.take_failover() is None


GLUE_PRODUCED = {FailureReason.PUBLISH_FAILED: "spark_ckpt/spark/supervisor.py"}
"""Reasons only the Spark glue observes (it sees the publisher fail), with where."""


class Spy:
    """Wraps a failure manager's ``handle_failure`` to see every reason handed to it."""

    def __init__(self, supervision: SupervisionRules) -> None:
        self.seen: list[FailureReason] = []
        self._handle = supervision.failures.handle_failure
        supervision.failures.handle_failure = self  # type: ignore[method-assign]

    def __call__(
        self, reason: FailureReason, checkpoint: int | None = None, msg: str = "", attempt: int = 0
    ) -> bool:
        self.seen.append(reason)
        return self._handle(reason, checkpoint, msg, attempt)


def test_every_failure_reason_is_produced_by_something(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """Each reason comes out of a rule here, or (for the glue's) is raised where it is seen."""

    def expire(supervision: SupervisionRules) -> None:
        supervision.trigger_seen(True, 1)
        clock.now += 11  # past checkpoint_timeout=10
        supervision.trigger_seen(True, 1)

    scenarios: dict[FailureReason, Callable[[SupervisionRules], object]] = {
        FailureReason.SOURCE_DECLINED_SOFT: lambda s: s.declines_seen([("soft", "open")], 1),
        FailureReason.SOURCE_DECLINED_HARD: lambda s: s.declines_seen([("hard", "lost")], 1),
        FailureReason.CHECKPOINT_EXPIRED: expire,
        FailureReason.HOOK_TRIGGER_FAILED: lambda s: s.hook_failed(1, False, "x", "hook raised"),
        FailureReason.HOOK_IO_FAILED: lambda s: s.hook_failed(1, True, "x", "store failed"),
        FailureReason.IO_ERROR: lambda s: s.query_failed("java.io.IOException: disk"),
        FailureReason.QUERY_FAILED: lambda s: s.query_failed("ValueError: bad row"),
        FailureReason.QUERY_STOPPED_BY_USER: lambda s: s.user_stopped(),
    }
    assert set(scenarios) | set(GLUE_PRODUCED) == set(FailureReason)
    for reason, scenario in scenarios.items():
        supervision = rules(clock, history, tolerable=10)
        spy = Spy(supervision)
        scenario(supervision)
        assert reason in spy.seen, f"{reason.name} was not produced by its scenario"
    root = Path(__file__).resolve().parents[2]
    for reason, module in GLUE_PRODUCED.items():
        source = (root / module).read_text()
        assert f"self.rules.fail(FailureReason.{reason.name}" in source, (reason, module)


def test_a_checkpoint_declined_hard_is_attempted_again_every_checkpoint_timeout(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """A source that keeps declining hard, tolerableFailedCheckpoints=1: the second attempt fails.

    It comes one checkpointTimeout after the first; both are in the chain and the history.
    """
    supervision = rules(clock, history, tolerable=1, checkpoint_timeout=5.0)
    for _ in range(5):  # polled often within the first attempt: counted once
        supervision.declines_seen([("hard", "T1 never ends")], 3)
        clock.now += 1
    assert supervision.take_failover() is None
    clock.now += 0.5
    supervision.declines_seen([("hard", "T1 never ends")], 3)
    chain = supervision.take_failover()
    assert chain is not None
    assert [(f.checkpoint_id, f.attempt) for f in chain] == [(3, 0), (3, 1)]
    assert "checkpoint 3 (attempt 2)" in str(chain[1])
    declined = [e.reason for e in history if isinstance(e, DeclineEvent)]
    assert declined == [
        "T1 never ends",
        "T1 never ends (still declined 1 x checkpointTimeout=5s later)",
    ]


def test_the_attempt_clock_restarts_when_the_hard_decline_clears(
    clock: FakeClock, history: list[HistoryEvent]
) -> None:
    """A hard decline that clears (a cut, or a soft decline) starts the attempts afresh."""
    supervision = rules(clock, history, tolerable=5, checkpoint_timeout=5.0)
    supervision.declines_seen([("hard", "r")], 3)
    clock.now += 4
    supervision.declines_seen([], 3)
    clock.now += 4
    supervision.declines_seen([("hard", "r")], 3)
    assert supervision.failures.failure_count == 1, "the same first attempt, counted once"
