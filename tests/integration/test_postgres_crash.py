"""Real SIGKILLs of a supervised postgres -> delta-2pc driver: during the snapshot, mid-stream."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.faults.postgres import run_scenario

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.mark.soak
def test_driver_killed_during_snapshot_and_mid_stream_loses_and_repeats_nothing(
    spark: SparkSession, pg_dsn: str, tmp_path: Path
) -> None:
    """Each workload transaction lands whole in one Delta version; the tables replay exactly.

    One plugin here (wal2json; the incremental snapshot's kill test runs pgoutput): recovery does
    not depend on the plugin, every other postgres test runs with both, and two minutes per
    scenario and plugin would push the suite past its time budget.
    """
    verdict, kills = run_scenario(spark, pg_dsn, tmp_path, "wal2json")
    assert kills == 2
    assert verdict.ok, verdict
    assert verdict.transactions > 200, "too few transactions were streamed to prove anything"
