"""The checkpoint gate: choose where a micro-batch ends.

Pure logic, no Spark. The connector lays the changes after the start offset out as a sequence of
*units* (a transaction, or a snapshot chunk): runs of changes that a batch should never split.
The gate proposes a cut at the read limit, asks the source whether a snapshot is available there
(FLIP-170), backs off to the last available cut, and if there is none beyond the start, goes
forward to the first available one (a single unit larger than the soft cap is delivered whole).
With no available cut at all it returns no cut and the most serious refusal it heard.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spark_ckpt.errors import UsageError
from spark_ckpt.model.availability import SnapshotAvailability

__all__ = ["Cut", "GateDecision", "choose_cut"]


@dataclass(frozen=True)
class Cut:
    """A position in the change stream after the start offset.

    Attributes
    ----------
    unit
        Index of the unit the cut falls in or after (0-based, counted from the start offset).
    within
        Changes of that unit before the cut (``1..size``; equal to the size at a unit boundary).
    changes
        Changes between the start offset and the cut.
    at_boundary
        True when the cut falls between two units.
    """

    unit: int
    within: int
    changes: int
    at_boundary: bool


@dataclass(frozen=True)
class GateDecision:
    """Where the gate cut, or why it could not.

    Attributes
    ----------
    cut
        The chosen cut, or None when no batch should run.
    refusal
        When there is no cut although changes are waiting: the most serious refusal heard (hard
        before soft; among equals, the one furthest from the start). None otherwise.
    asked
        How many availability questions the gate asked (cost accounting).
    """

    cut: Cut | None
    refusal: SnapshotAvailability | None
    asked: int


def _locate(ends: Sequence[int], sizes: Sequence[int], changes: int) -> Cut:
    """Return the cut ``changes`` changes after the start, given cumulative unit ends."""
    unit = bisect.bisect_left(ends, changes)
    within = sizes[unit] - (ends[unit] - changes)
    return Cut(unit, within, changes, within == sizes[unit])


def choose_cut(
    unit_sizes: Sequence[int],
    max_changes: int | None,
    availability: Callable[[Cut], SnapshotAvailability],
    *,
    gated: bool = True,
) -> GateDecision:
    """Choose the end of the next batch.

    Runs on the driver, once per trigger, in the reader's process.

    Parameters
    ----------
    unit_sizes
        Sizes (change counts, each >= 1) of the complete units available after the start offset,
        in stream order.
    max_changes
        The soft cap on changes per batch (None: no cap).
    availability
        Answers whether a snapshot may be taken at a cut (the source's FLIP-170 provider).
    gated
        False cuts exactly at the cap without asking (transactions may be split): only for
        measuring what the gate costs.

    Returns
    -------
    GateDecision
        The cut, or the reason there is none.
    """
    if any(size < 1 for size in unit_sizes):
        raise UsageError(f"unit sizes must be >= 1, got {list(unit_sizes)}")
    if max_changes is not None and max_changes < 1:
        raise UsageError(f"max_changes must be >= 1 or None, got {max_changes}")
    ends = list(itertools.accumulate(unit_sizes))
    total = ends[-1] if ends else 0
    if total == 0:
        return GateDecision(None, None, 0)
    target = total if max_changes is None else min(max_changes, total)
    target_cut = _locate(ends, unit_sizes, target)
    if not gated:
        return GateDecision(target_cut, None, 0)

    asked = 0
    worst: tuple[bool, int, SnapshotAvailability] | None = None

    def ask(cut: Cut) -> bool:
        nonlocal asked, worst
        asked += 1
        answer = availability(cut)
        if answer.is_available:
            return True
        rank = (answer.is_hard, cut.changes, answer)
        if worst is None or rank[:2] >= worst[:2]:
            worst = rank
        return False

    if ask(target_cut):
        return GateDecision(target_cut, None, asked)
    # Back off: unit boundaries before the target, nearest first.
    for unit in range(target_cut.unit - 1, -1, -1):
        cut = Cut(unit, unit_sizes[unit], ends[unit], True)
        if ask(cut):
            return GateDecision(cut, None, asked)
    # Nothing available up to the cap: go forward to the first available boundary beyond it.
    for unit in range(target_cut.unit, len(ends)):
        if ends[unit] <= target:
            continue
        cut = Cut(unit, unit_sizes[unit], ends[unit], True)
        if ask(cut):
            return GateDecision(cut, None, asked)
    assert worst is not None  # at least the target was refused
    return GateDecision(None, worst[2], asked)
