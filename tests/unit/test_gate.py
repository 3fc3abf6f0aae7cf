"""The checkpoint gate: where a batch ends."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from spark_ckpt import AVAILABLE
from spark_ckpt import SnapshotAvailability as SA
from spark_ckpt.sources.gate import Cut, choose_cut


def boundaries_only(cut: Cut) -> SA:
    """A transactional source: available exactly between units."""
    return AVAILABLE if cut.at_boundary else SA.soft_failure(f"inside unit {cut.unit}")


def test_no_changes_no_cut_no_refusal() -> None:
    """An idle source neither cuts nor declines."""
    decision = choose_cut([], 10, boundaries_only)
    assert decision.cut is None
    assert decision.refusal is None


def test_cut_at_the_cap_when_it_is_a_boundary() -> None:
    """A cap that falls on a boundary is taken as is, with one question."""
    decision = choose_cut([3, 2, 5], 5, boundaries_only)
    assert decision.cut == Cut(1, 2, 5, True)
    assert decision.asked == 1


def test_backs_off_to_the_last_boundary_under_the_cap() -> None:
    """A cap inside a unit backs off to the previous boundary."""
    decision = choose_cut([3, 2, 5], 7, boundaries_only)
    assert decision.cut == Cut(1, 2, 5, True)


def test_oversized_unit_is_delivered_whole() -> None:
    """A first unit larger than the cap goes forward to its end."""
    decision = choose_cut([50, 1], 10, boundaries_only)
    assert decision.cut == Cut(0, 50, 50, True)


def test_no_cap_takes_everything() -> None:
    """Without a cap the batch ends after the last complete unit."""
    assert choose_cut([4, 4], None, boundaries_only).cut == Cut(1, 4, 8, True)


def test_gate_off_cuts_exactly_at_the_cap_without_asking() -> None:
    """Gate off splits units and asks nothing."""
    decision = choose_cut([3, 2, 5], 4, boundaries_only, gated=False)
    assert decision.cut == Cut(1, 1, 4, False)
    assert decision.asked == 0


def test_no_available_cut_reports_the_most_serious_refusal() -> None:
    """Hard beats soft; the furthest hard refusal is reported."""

    def refuse(cut: Cut) -> SA:
        if cut.changes >= 5:
            return SA.hard_failure(f"hard at {cut.changes}")
        return SA.soft_failure(f"soft at {cut.changes}")

    decision = choose_cut([2, 3, 4], 3, refuse)
    assert decision.cut is None
    assert decision.refusal == SA.hard_failure("hard at 9")


def test_snapshot_phase_extends_the_batch_to_its_end() -> None:
    """Boundaries inside a non-resumable phase are refused; the batch runs to the phase end."""
    phase_end = 6

    def snapshot(cut: Cut) -> SA:
        if cut.changes < phase_end:
            return SA.soft_failure("snapshot in progress")
        return boundaries_only(cut)

    decision = choose_cut([2, 2, 2, 3], 3, snapshot)
    assert decision.cut == Cut(2, 2, 6, True)


@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    cap=st.one_of(st.none(), st.integers(1, 100)),
)
def test_gated_cuts_are_boundaries_under_the_soft_cap(sizes: list[int], cap: int | None) -> None:
    """A gated cut is a boundary; it respects the cap unless the first unit alone exceeds it."""
    decision = choose_cut(sizes, cap, boundaries_only)
    cut = decision.cut
    assert cut is not None
    assert cut.at_boundary
    ends = list(itertools.accumulate(sizes))
    assert cut.changes in ends
    if cap is None:
        assert cut.changes == ends[-1]
    elif sizes[0] > cap:
        assert cut.changes == sizes[0]
    else:
        # The largest boundary not above the cap.
        assert cut.changes == max(e for e in ends if e <= cap)


@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    cap=st.integers(1, 100),
)
def test_ungated_cuts_exactly_at_the_cap(sizes: list[int], cap: int) -> None:
    """Gate off: min(cap, total) changes, wherever that falls."""
    cut = choose_cut(sizes, cap, boundaries_only, gated=False).cut
    assert cut is not None
    assert cut.changes == min(cap, sum(sizes))
