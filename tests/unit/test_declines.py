"""Source-side decline tracking and FLIP-170 local escalation."""

from __future__ import annotations

import pytest

from spark_ckpt import SnapshotAvailability as SA
from spark_ckpt.model.declines import DeclineTracker


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_streak_reports_how_long_data_has_been_held() -> None:
    """Held-for grows from the first decline of a streak."""
    clock = FakeClock()
    tracker = DeclineTracker(clock=clock)
    first = tracker.decline(1, SA.soft_failure("waiting for END"), 5)
    clock.now += 7
    second = tracker.decline(1, SA.soft_failure("waiting for END"), 6)
    assert first.held_for == 0
    assert second.held_for == 7
    assert second.held_since == 1000.0
    assert second.held_changes == 6
    assert tracker.soft_declines == 2


def test_soft_decline_past_the_bound_becomes_hard() -> None:
    """A soft decline lasting longer than softDeclineTimeout is reported hard, with both reasons."""
    clock = FakeClock()
    tracker = DeclineTracker(10.0, clock=clock)
    assert not tracker.decline(3, SA.soft_failure("txn t1 open"), 1).availability.is_hard
    clock.now += 10
    at_bound = tracker.decline(3, SA.soft_failure("txn t1 open"), 1)
    clock.now += 0.5
    past = tracker.decline(3, SA.soft_failure("txn t1 open"), 1)
    assert not at_bound.escalated
    assert past.escalated
    assert past.availability.is_hard
    assert "softDeclineTimeout=10s" in past.availability.message
    assert "txn t1 open" in past.availability.message
    assert tracker.hard_declines == 1


def test_a_cut_ends_the_streak() -> None:
    """After a cut, the next decline starts a new streak (no escalation carried over)."""
    clock = FakeClock()
    tracker = DeclineTracker(10.0, clock=clock)
    tracker.decline(1, SA.soft_failure("x"), 1)
    clock.now += 9
    tracker.accept()
    assert tracker.current is None
    clock.now += 5
    again = tracker.decline(2, SA.soft_failure("x"), 1)
    assert again.held_for == 0
    assert not again.escalated


def test_idle_is_not_a_decline() -> None:
    """An idle source clears the streak and counts nothing."""
    tracker = DeclineTracker(clock=FakeClock())
    tracker.decline(1, SA.soft_failure("x"), 1)
    tracker.idle()
    assert tracker.current is None
    assert tracker.hard_declines == 0


def test_hard_decline_stays_hard_and_is_counted() -> None:
    """A hard refusal is reported as is."""
    tracker = DeclineTracker(clock=FakeClock())
    decline = tracker.decline(1, SA.hard_failure("slot dropped"), None)
    assert decline.availability.is_hard
    assert not decline.escalated
    assert decline.to_json()["kind"] == "hard"
    assert tracker.hard_declines == 1


def test_available_is_not_a_decline() -> None:
    """Recording AVAILABLE as a decline is a programming error."""
    from spark_ckpt import AVAILABLE

    with pytest.raises(ValueError, match="not a decline"):
        DeclineTracker().decline(1, AVAILABLE, 0)


def test_json_form_has_stable_keys() -> None:
    """The progress-event form has the documented keys."""
    decline = DeclineTracker(clock=FakeClock()).decline(4, SA.soft_failure("r"), 2)
    assert list(decline.to_json()) == [
        "checkpoint",
        "kind",
        "reason",
        "heldSinceMs",
        "heldForMs",
        "heldChanges",
        "escalated",
    ]


def test_a_decline_report_round_trips_and_leaves_out_the_held_time() -> None:
    """What a reader tells the supervisor changes only when the decline does."""
    from spark_ckpt.model.availability import SnapshotAvailability
    from spark_ckpt.model.declines import Decline, DeclineReport

    soft = SnapshotAvailability.soft_failure("T1 waits")
    early = Decline(3, soft, held_since=100.0, held_for=1.0, held_changes=4, escalated=False)
    late = Decline(3, soft, held_since=100.0, held_for=9.0, held_changes=4, escalated=False)
    assert early.report() == late.report()
    report = early.report()
    assert DeclineReport.from_json(report.to_json()) == report
    assert (report.kind, report.reason, report.held_since_ms) == ("soft", "T1 waits", 100_000)


def test_escalation_is_measured_from_the_last_progress_of_held_back_data() -> None:
    """A long streak whose held data still grows stays soft; the reason names the oldest unit."""
    clock = FakeClock()
    tracker = DeclineTracker(10.0, clock=clock)
    tracker.decline(1, SA.soft_failure("snapshot in progress"), 10, stalled_for=0)
    clock.now += 60
    growing = tracker.decline(1, SA.soft_failure("snapshot in progress"), 900, stalled_for=2)
    assert not growing.escalated
    assert growing.held_for == 60
    stuck = tracker.decline(1, SA.soft_failure("T1 open"), 900, stalled_for=11, oldest="T1")
    assert stuck.escalated
    assert stuck.availability.message == (
        "held-back data exceeded softDeclineTimeout=10s without progress; the oldest held back "
        "is T1: T1 open"
    )
