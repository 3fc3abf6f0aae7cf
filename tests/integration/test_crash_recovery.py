"""Real SIGKILLs of the whole driver at each protocol point of delta-2pc, then a restart.

The chained scenario kills the driver (its JVM and every Python worker) at each protocol point in
turn, one batch after another, restarting the query on the same checkpoint after each kill; then
every Delta version is read back with delta-spark: no source transaction may be lost, duplicated
or visible in part. The test command runs the chain of the points around Spark's commit of a
batch (``crash.SHORT_CHAINED``), the soak tier the chain of every point (``crash.CHAINED``).
``bench/crash_matrix.py`` runs each point as a scenario of its own, from a fresh start,
repeatedly, and prints the totals.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import spark_ckpt
from harness.faults import crash, jvm_archive
from harness.faults.crash import CRASH_BATCH
from spark_ckpt.model.events import StartEvent
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.state.storage import Location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


SINGLE_POINT_SCENARIOS = sorted(set(crash.SCENARIOS) - crash.SUPERVISED - crash.CHAINS)


def _covers(chain: str, scenario: str) -> bool:
    """Whether ``chain`` kills in the sequence ``scenario`` kills in."""
    points = [f.partition(":")[0] for f in crash.SCENARIOS[scenario] if f]
    chain_points = [f.partition(":")[0] for f in crash.SCENARIOS[chain] if f]
    # during_abort only happens in a re-run of a batch killed after its manifest.
    return any(chain_points[i : i + len(points)] == points for i in range(len(chain_points)))


def _chain(spark: SparkSession, factory: pytest.TempPathFactory, chain: str) -> crash.Outcome:
    """One driver lineage killed at each point of ``chain`` in turn, then run clean; verified."""
    return crash.run_scenario(spark, chain, factory.mktemp(chain), seed=17)


@pytest.fixture(scope="module")
def commit_points(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> crash.Outcome:
    """The chain of the points around Spark's commit of a batch (the test command's)."""
    return _chain(spark, tmp_path_factory, crash.SHORT_CHAINED)


@pytest.fixture(scope="module")
def every_point(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> crash.Outcome:
    """The chain of every protocol point (the soak tier's)."""
    return _chain(spark, tmp_path_factory, crash.CHAINED)


def test_the_chains_kill_at_the_points_of_the_single_point_scenarios() -> None:
    """The soak tier's chain covers every single-point scenario, the test command's four."""
    for scenario in SINGLE_POINT_SCENARIOS:
        assert _covers(crash.CHAINED, scenario), f"the chain misses scenario {scenario}"
    assert set(COMMIT_POINT_SCENARIOS) == {
        "after_manifest",
        "before_publish",
        "during_abort",
        "during_publish",
    }


def test_the_crash_drivers_start_from_a_class_data_sharing_archive() -> None:
    """The drivers' JVM archive dumps (a failed dump only slows every driver, silently)."""
    archive = jvm_archive.ensure_archive()
    assert archive is not None, "the drivers' JVM archive could not be dumped: stderr says why"


COMMIT_POINT_SCENARIOS = [s for s in SINGLE_POINT_SCENARIOS if _covers(crash.SHORT_CHAINED, s)]


@pytest.mark.parametrize("scenario", COMMIT_POINT_SCENARIOS)
def test_sigkill_at_a_commit_point_loses_duplicates_and_tears_nothing(
    commit_points: crash.Outcome, scenario: str
) -> None:
    """Killed at this point (within the chain) and restarted: the table is exact."""
    _check(commit_points, scenario)


@pytest.mark.soak
@pytest.mark.parametrize("scenario", SINGLE_POINT_SCENARIOS)
def test_sigkill_at_protocol_point_loses_duplicates_and_tears_nothing(
    every_point: crash.Outcome, scenario: str
) -> None:
    """Killed at this point (within the chain) and restarted: the table is exact."""
    _check(every_point, scenario)


def _check(chained: crash.Outcome, scenario: str) -> None:
    """The kill at ``scenario``'s point fired in the chain, and the restart left all exact.

    The restart completed the killed batch (the chain's next kill fired in a later batch, or the
    clean run finished), and the table holds every transaction once, whole, in every version.
    """
    point = crash.SCENARIOS[scenario][-2]
    assert point is not None
    kind = point.partition(":")[0]
    kills = [fault for fault in chained.fired if fault.partition(":")[0] == kind]
    assert kills, f"no driver was killed at {kind}; the chain's kills: {chained.fired}"
    chain = crash.SCENARIOS[chained.scenario]
    assert chained.fired == [f for f in chain if f is not None], "a kill of the chain never fired"
    assert (chained.lost, chained.duplicated, chained.torn) == (0, 0, 0)
    assert chained.versions > crash.CRASH_BATCH + len(chained.fired) - 1


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
