"""The held-back tracker: since when, last progress, and the bounded log warning (fake clock)."""

from __future__ import annotations

import pytest

from spark_ckpt.errors import UsageError
from spark_ckpt.model.held_back import (
    WARN_AFTER,
    WARN_EVERY,
    HeldBackTracker,
    describe_duration,
)

T1 = "transaction 'T1' (first record 0001.jsonl:1)"
T2 = "transaction 'T2' (first record 0001.jsonl:9)"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_nothing_held_back_is_reported_as_nothing() -> None:
    """No changes, no units and no reason: nothing is held back."""
    tracker = HeldBackTracker(FakeClock())
    tracker.observe(0, 0, None, None)
    assert tracker.current is None


def test_since_is_the_first_trigger_that_saw_the_oldest_unit() -> None:
    """The same oldest unit keeps its since; how long it is held grows."""
    clock = FakeClock()
    tracker = HeldBackTracker(clock)
    tracker.observe(2, 1, T1, "T1 waits for its END")
    clock.now += 40
    tracker.observe(2, 1, T1, "T1 waits for its END")
    held = tracker.current
    assert held is not None
    assert (held.since, held.held_for, held.stalled_for) == (1000.0, 40.0, 40.0)
    assert held.to_json() == {
        "changes": 2,
        "transactions": 1,
        "oldest": T1,
        "sinceMs": 1_000_000,
        "heldForMs": 40_000,
        "lastProgressMs": 1_000_000,
        "reason": "T1 waits for its END",
    }


def test_growth_of_the_held_units_is_progress_and_resets_the_escalation_clock() -> None:
    """More changes in the same units: progress now, but the oldest is held since the start."""
    clock = FakeClock()
    tracker = HeldBackTracker(clock)
    tracker.observe(1000, 1, "the snapshot", "snapshot in progress")
    clock.now += 250
    tracker.observe(5000, 1, "the snapshot", "snapshot in progress")
    held = tracker.current
    assert held is not None
    assert held.stalled_for == 0
    assert held.held_for == 250


def test_a_new_oldest_unit_resets_since_and_counts_as_progress() -> None:
    """The oldest was delivered (or an older one appeared): a new streak for the new oldest."""
    clock = FakeClock()
    tracker = HeldBackTracker(clock)
    tracker.observe(3, 1, T1, "T1 open")
    clock.now += 100
    tracker.observe(1, 1, T2, "T2 open")
    held = tracker.current
    assert held is not None
    assert (held.since, held.progressed_at) == (1100.0, 1100.0)


def test_units_queueing_behind_a_stuck_oldest_unit_are_not_its_progress() -> None:
    """Later transactions waiting behind T1 add changes but do not move T1: the clock runs on."""
    clock = FakeClock()
    tracker = HeldBackTracker(clock)
    tracker.observe(2, 1, T1, "T1 has ended but only 2 of its 3 events have been read")
    for changes, units in [(5, 2), (9, 3), (14, 4)]:
        clock.now += 100
        tracker.observe(changes, units, T1, "T1 has ended but ...")
    held = tracker.current
    assert held is not None
    assert held.stalled_for == 300


def test_fewer_changes_is_not_progress() -> None:
    """A unit behind the oldest completing and leaving does not move the oldest."""
    clock = FakeClock()
    tracker = HeldBackTracker(clock)
    tracker.observe(5, 2, T1, "T1 open")
    clock.now += 100
    tracker.observe(2, 1, T1, "T1 open")
    held = tracker.current
    assert held is not None
    assert held.stalled_for == 100


def test_the_warning_waits_for_warn_after_and_comes_at_most_every_warn_every() -> None:
    """Not before WARN_AFTER seconds held; then once, and again only WARN_EVERY later."""
    clock = FakeClock()
    tracker = HeldBackTracker(clock)
    due = []
    for at in [0, WARN_AFTER, WARN_AFTER + 1, WARN_AFTER + 2, WARN_AFTER + WARN_EVERY + 1]:
        clock.now = 1000.0 + at
        tracker.observe(2, 1, T1, "T1 open")
        due.append(tracker.warning_due())
    assert due == [False, False, True, False, True]


def test_the_warning_is_timed_by_the_current_oldest_unit() -> None:
    """Transactions that complete one after another are never held long enough to warn."""
    clock = FakeClock()
    tracker = HeldBackTracker(clock)
    for index in range(10):
        tracker.observe(1, 1, f"transaction '{index}'", "open")
        assert not tracker.warning_due()
        clock.now += 20


def test_describe_says_how_much_how_long_the_oldest_and_why() -> None:
    """The log line carries everything a person needs."""
    clock = FakeClock()
    tracker = HeldBackTracker(clock)
    tracker.observe(12, 2, T1, "T1 waits for its END")
    clock.now += 130
    tracker.observe(12, 2, T1, "T1 waits for its END")
    assert tracker.current is not None
    assert tracker.current.describe() == (
        f"12 change(s) held back in 2 open transactions for 2m 10s; the oldest is {T1} "
        "(last progress 2m 10s ago): T1 waits for its END"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "250ms"), (42.9, "42s"), (130, "2m 10s"), (3 * 3600 + 300, "3h 05m")],
)
def test_durations_read_like_a_clock(seconds: float, text: str) -> None:
    """Durations for people: milliseconds, seconds, minutes and seconds, hours and minutes."""
    assert describe_duration(seconds) == text


def test_negative_counts_are_a_usage_error() -> None:
    """A connector reporting negative counts is a bug, not something to report."""
    with pytest.raises(UsageError, match="must be >= 0"):
        HeldBackTracker(FakeClock()).observe(-1, 0, None, None)
