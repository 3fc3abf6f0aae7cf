"""Real SIGKILLs of drivers writing mirrors, at every 2PC protocol point and at random moments.

The driver (JVM and Python workers included) is killed at the protocol points mirror mode adds
(after the batch's plan, between mirror tables, after the change log's commit), one batch after
another, then runs clean to the end (:mod:`harness.faults.mirror`). Every mirror must equal its
source table, and every checkpoint in the index must show the tables consistent with one another.

Kills at random moments are the soak tier's: a random kill lands somewhere between two of the
points above, whose recovery the protocol-point kills already prove, and it costs a driver run of
its own (a driver's JVM and first batch take most of a run: about 50 s on two busy cores, the
later batches a second or two each). ``bench/crash_matrix.py --mirror`` kills at all six
protocol points, repeatedly.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.faults import mirror

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

POINTS = ("after_mirror_plan", "during_mirror", "during_publish")
"""Killed in batches 1, 2 and 3; the clean run then commits batches 3 to 7 (the shop log of
70 transactions holds 8 batches), so the index holds 8 checkpoints, 5 of them after the last
kill."""


def test_mirrors_survive_kills_at_every_protocol_point(spark: SparkSession, tmp_path: Path) -> None:
    outcome = mirror.run_mirror_crashes(spark, tmp_path, seed=5, random_kills=0, points=POINTS)
    assert outcome.crashes == len(POINTS)
    assert outcome.mismatched_tables == 0, outcome
    assert outcome.inconsistent_checkpoints == 0, outcome
    assert outcome.index_gaps == 0, outcome
    assert outcome.checkpoints > len(POINTS), outcome


@pytest.mark.soak
def test_mirrors_survive_kills_at_random_moments(spark: SparkSession, tmp_path: Path) -> None:
    """The protocol-point kills, then drivers killed 12 to 25 s after they start, twice."""
    outcome = mirror.run_mirror_crashes(spark, tmp_path, seed=5, random_kills=2, points=POINTS)
    assert outcome.crashes >= len(POINTS)
    assert outcome.mismatched_tables == 0, outcome
    assert outcome.inconsistent_checkpoints == 0, outcome
    assert outcome.index_gaps == 0, outcome
    assert outcome.checkpoints > len(POINTS), outcome
