"""Real SIGKILLs of drivers writing mirrors, at every 2PC protocol point and at random moments.

The driver (JVM and Python workers included) is killed at the protocol points mirror mode adds
(after the batch's plan, between mirror tables, after the change log's commit), one batch after
another, then at a random moment, then runs clean to the end (:mod:`harness.faults.mirror`). Every
mirror must equal its source table, and every checkpoint in the index must show the tables
consistent with one another. ``bench/crash_matrix.py --mirror`` kills at all six protocol points,
repeatedly (a driver run costs about half a minute, too long to run them all here).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.faults import mirror

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def test_mirrors_survive_kills_at_every_protocol_point_and_at_random(
    spark: SparkSession, tmp_path: Path
) -> None:
    points = ("after_mirror_plan", "during_mirror", "during_publish")
    outcome = mirror.run_mirror_crashes(spark, tmp_path, seed=5, random_kills=1, points=points)
    assert outcome.crashes >= len(points)
    assert outcome.mismatched_tables == 0, outcome
    assert outcome.inconsistent_checkpoints == 0, outcome
    assert outcome.index_gaps == 0, outcome
    assert outcome.checkpoints > len(points), outcome
