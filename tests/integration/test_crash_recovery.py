"""Real SIGKILLs of the whole driver at each protocol point of delta-2pc, then a restart.

The chained scenario kills the driver (its JVM and every Python worker) at each protocol point in
turn, one batch after another, restarting the query on the same checkpoint after each kill; then
every Delta version is read back with delta-spark: no source transaction may be lost, duplicated
or visible in part. ``bench/crash_matrix.py`` runs each point as a scenario of its own, from a
fresh start, repeatedly, and prints the totals.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import spark_ckpt
from harness.faults import crash
from harness.faults.crash import CRASH_BATCH
from spark_ckpt.model.events import StartEvent
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.state.storage import Location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


CHAIN = crash.SCENARIOS[crash.CHAINED]
SINGLE_POINT_SCENARIOS = sorted(set(crash.SCENARIOS) - crash.SUPERVISED - {crash.CHAINED})


@pytest.fixture(scope="module")
def chained(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> crash.Outcome:
    """One driver lineage killed at every protocol point in turn, then run clean; verified."""
    workdir = tmp_path_factory.mktemp("chained")
    return crash.run_scenario(spark, crash.CHAINED, workdir, seed=17)


def test_the_chain_kills_at_every_point_a_single_point_scenario_kills_at() -> None:
    """The suite runs the chain instead of the single-point scenarios: it must cover them all."""
    for scenario in SINGLE_POINT_SCENARIOS:
        points = [f.partition(":")[0] for f in crash.SCENARIOS[scenario] if f]
        chain_points = [f.partition(":")[0] for f in CHAIN if f]
        # during_abort only happens in a re-run of a batch killed after its manifest.
        assert any(chain_points[i : i + len(points)] == points for i in range(len(chain_points))), (
            f"the chain has no kill sequence {points} (scenario {scenario})"
        )


@pytest.mark.parametrize("scenario", SINGLE_POINT_SCENARIOS)
def test_sigkill_at_protocol_point_loses_duplicates_and_tears_nothing(
    chained: crash.Outcome, scenario: str
) -> None:
    """Killed at this point (within the chain) and restarted: the table is exact.

    The restart completed the killed batch (the chain's next kill fired in a later batch, or the
    clean run finished), and the table holds every transaction once, whole, in every version.
    """
    point = crash.SCENARIOS[scenario][-2]
    assert point is not None
    kind = point.partition(":")[0]
    kills = [fault for fault in chained.fired if fault.partition(":")[0] == kind]
    assert kills, f"no driver was killed at {kind}; the chain's kills: {chained.fired}"
    assert chained.fired == [f for f in CHAIN if f is not None], "a kill of the chain never fired"
    assert (chained.lost, chained.duplicated, chained.torn) == (0, 0, 0)
    assert chained.versions > crash.CRASH_BATCH + 5


def test_a_restart_with_nothing_to_read_publishes_what_the_killed_run_completed(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    """Killed as it published its last batch, an unsupervised bounded run leaves a tail behind.

    Spark wrote ``commits/0`` (the log fits one batch), so the restart runs no batch and never
    builds the sink's writer: only the control plane's restore at the query's start can publish
    batch 0. Without it the table stayed empty while ``Control.await_termination`` said done.
    The restart runs in the test's own session (a classic one, installed): no second driver JVM.
    """
    log, table, ckpt = tmp_path / "log", tmp_path / "table", tmp_path / "ckpt"
    expected = crash.make_log(log, seed=5, transactions=3)
    assert crash.run_driver(log, table, ckpt, "before_publish:0") == -signal.SIGKILL
    checkpoint = SparkCheckpoint(str(ckpt))
    # The killed run completed its only batch: otherwise the restart would run one.
    assert (checkpoint.latest_committed(), checkpoint.logged_batches()) == (0, [0])
    assert (
        not Location(str(table / "_delta_log")).exists()
        or not spark.read.format("delta").load(str(table)).count()
    ), "batch 0 was published before the kill"
    writer = crash.bounded_query(spark, str(log), str(table))
    query = writer.option("checkpointLocation", str(ckpt)).start()
    try:
        assert control.await_termination(query, 120), "the restarted query did not end in 120 s"
    finally:
        query.stop()  # a no-op once it ended; else it must not outlive the test in the session
    assert checkpoint.logged_batches() == [0], "the restart ran a batch: it proves nothing"
    lost, duplicated, torn, _ = crash.verify(spark, table, expected)
    assert (lost, duplicated, torn) == (0, 0, 0)


@pytest.mark.soak
def test_supervised_restart_after_a_kill_restores_the_exact_checkpoint_and_its_hook_data(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Killed after batch 2's manifest: the restart resumes from 1, exactly, hook data included."""
    scenario = "supervised_after_manifest"
    outcome = crash.run_scenario(spark, scenario, tmp_path, seed=23)
    assert (outcome.lost, outcome.duplicated, outcome.torn) == (0, 0, 0)
    restored = CRASH_BATCH - 1
    handed_back = [
        json.loads(line) for line in (tmp_path / crash.RESTORED_FILE).read_text().splitlines()
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
