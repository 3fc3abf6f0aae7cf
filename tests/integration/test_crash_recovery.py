"""Real SIGKILLs of the whole driver at each protocol point of delta-2pc, then a restart.

Each scenario kills the driver (its JVM and every Python worker) at one point of batch 2's life,
restarts the query on the same checkpoint, and reads every Delta version back with delta-spark:
no source transaction may be lost, duplicated or visible in part. ``bench/crash_matrix.py`` runs
the same scenarios repeatedly and prints the totals.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import crash_harness
from crash_harness import CRASH_BATCH

from spark_ckpt.model.events import StartEvent
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.mark.parametrize(
    "scenario", sorted(set(crash_harness.SCENARIOS) - crash_harness.SUPERVISED)
)
def test_sigkill_at_protocol_point_loses_duplicates_and_tears_nothing(
    spark: SparkSession, tmp_path: Path, scenario: str
) -> None:
    """After a kill at this point and a restart, the table holds every transaction once, whole."""
    outcome = crash_harness.run_scenario(spark, scenario, tmp_path, seed=17)
    assert outcome.crashes == len(crash_harness.SCENARIOS[scenario]) - 1
    assert (outcome.lost, outcome.duplicated, outcome.torn) == (0, 0, 0)
    assert outcome.versions > crash_harness.CRASH_BATCH + 1


def test_supervised_restart_after_a_kill_restores_the_exact_checkpoint_and_its_hook_data(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Killed after batch 2's manifest: the restart resumes from 1, exactly, hook data included."""
    scenario = "supervised_after_manifest"
    outcome = crash_harness.run_scenario(spark, scenario, tmp_path, seed=23)
    assert (outcome.lost, outcome.duplicated, outcome.torn) == (0, 0, 0)
    restored = CRASH_BATCH - 1
    handed_back = [
        json.loads(line)
        for line in (tmp_path / crash_harness.RESTORED_FILE).read_text().splitlines()
    ]
    assert handed_back == [{"checkpoint": restored, "data": f"at {restored}"}]
    history = HistoryLog(SparkCheckpoint(str(tmp_path / "ckpt")))
    starts = [e for e in history.events() if isinstance(e, StartEvent)]
    assert [(s.restored, s.rerun_batch) for s in starts] == [
        (None, None),
        (restored, CRASH_BATCH),
    ]
    records = {r.checkpoint_id: r for r in history.records()}
    assert records[restored].restarts == 1
    completed = [r for r in records.values() if r.completed]
    assert completed, "no checkpoint completed"
    assert all(r.hooks == ["crash-recorder"] for r in completed)
    published = [r.delta_version for r in completed if r.rows]
    assert published == sorted(published)
    assert None not in published
    assert len(set(published)) == len(published), "each checkpoint is its own Delta version"
