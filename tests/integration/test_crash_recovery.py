"""Real SIGKILLs of the whole driver at each protocol point of delta-2pc, then a restart.

Each scenario kills the driver (its JVM and every Python worker) at one point of batch 2's life,
restarts the query on the same checkpoint, and reads every Delta version back with delta-spark:
no source transaction may be lost, duplicated or visible in part. ``bench/crash_matrix.py`` runs
the same scenarios repeatedly and prints the totals.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import crash_harness

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.mark.parametrize("scenario", sorted(crash_harness.SCENARIOS))
def test_sigkill_at_protocol_point_loses_duplicates_and_tears_nothing(
    spark: SparkSession, tmp_path: Path, scenario: str
) -> None:
    """After a kill at this point and a restart, the table holds every transaction once, whole."""
    outcome = crash_harness.run_scenario(spark, scenario, tmp_path, seed=17)
    assert outcome.crashes == len(crash_harness.SCENARIOS[scenario]) - 1
    assert (outcome.lost, outcome.duplicated, outcome.torn) == (0, 0, 0)
    assert outcome.versions > crash_harness.CRASH_BATCH + 1
