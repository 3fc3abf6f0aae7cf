"""Crash harness for mirror mode: SIGKILL drivers writing mirrors, then check every checkpoint.

A shop log (``spark_ckpt.testing.shop_workload``: orders and items changed together so that each
order's total is the sum of its items) is streamed by :mod:`harness.faults.crash`'s driver in
``mode=mirror``. The driver is killed at each 2PC protocol point of successive batches (every
kill in a later batch than the one before, so each restart makes progress), then at random
moments, then runs clean to the end. Verified:

- every mirror equals the source table's final state, row for row (``read_consistent``,
  delta-spark);
- at every checkpoint in the index, the tables at the versions it records (delta-rs, which
  must agree with delta-spark on the newest) hold the invariant across tables;
- the index has no gap between its first and last checkpoint.

Used by ``tests/integration/test_mirror_crash.py`` and ``bench/crash_matrix.py --mirror``.
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from harness.faults import crash
from harness.faults.crash import Settings
from spark_ckpt.state.mirrors import CHECKPOINTS_TABLE
from spark_ckpt.testing.debezium_log import write_log
from spark_ckpt.testing.shop_workload import ITEMS, ORDERS, ShopWorkload, invariant_violations

PROTOCOL_FAULTS = (
    "after_staging",
    "after_mirror_plan",
    "after_manifest",
    "before_publish",
    "during_mirror",
    "during_publish",
)
"""Where a driver is killed, in this order, each in a later batch than the one before."""


@dataclass
class MirrorOutcome:
    """What a mirror crash run found (all but ``checkpoints`` and ``crashes`` must be 0)."""

    mismatched_tables: int
    inconsistent_checkpoints: int
    index_gaps: int
    checkpoints: int
    crashes: int

    def to_json(self) -> str:
        """One JSON object."""
        return json.dumps(self.__dict__)


def make_shop_log(directory: Path, seed: int, transactions: int = 70) -> ShopWorkload:
    """Write a shop log of ``transactions`` transactions (a few files); return the workload."""
    workload = ShopWorkload(seed=seed)
    records: list[dict[str, Any]] = []
    for number in range(transactions):
        records += workload.debezium_records(
            workload.step(), f"shop-{number}", 1_700_000_000_000 + number
        )
    rng = random.Random(seed)
    write_log(str(directory), records, sorted(rng.sample(range(len(records)), 3)))
    return workload


def _rows(frame: Any) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def _normalised(rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {tuple(sorted((k, None if v is None else str(v)) for k, v in r.items())) for r in rows}


def _index(root: Path) -> dict[int, dict[str, tuple[str, int]]]:
    """The checkpoint index as ``{checkpoint: {table: (path, version)}}`` (delta-rs)."""
    from harness.delta_reads import read_delta

    index: dict[int, dict[str, tuple[str, int]]] = {}
    for row in read_delta(str(root / CHECKPOINTS_TABLE)).to_pylist():
        index.setdefault(row["checkpoint_id"], {})[row["table"]] = (row["path"], row["version"])
    return index


def _rows_at(root: Path, path: str, version: int) -> list[dict[str, Any]]:
    """A mirror's rows at one Delta version (delta-rs, deletion vectors applied)."""
    from harness.delta_reads import read_delta

    table = read_delta(str(root / path), version)
    return cast("list[dict[str, Any]]", table.to_pylist())


def verify_mirrors(spark: Any, root: Path, workload: ShopWorkload, crashes: int) -> MirrorOutcome:
    """Compare the mirrors with the workload, and check every checkpoint of the index.

    The newest checkpoint is read with ``read_consistent`` (delta-spark); every checkpoint,
    that one included, with delta-rs at the versions the index records, which must agree with
    delta-spark where both read (a time-travel read per table and checkpoint in delta-spark took
    most of a run's verification: 36 s for 8 checkpoints).
    """
    import spark_ckpt

    index = _index(root)
    checkpoints = sorted(index)
    gaps = sum(b - a - 1 for a, b in itertools.pairwise(checkpoints))
    newest = {
        name: _rows(frame) for name, frame in spark_ckpt.read_consistent(spark, str(root)).items()
    }
    mismatched = 0
    for name in (ORDERS, ITEMS):
        expected = _normalised(list(workload.rows[name].values()))
        mismatched += _normalised(newest.get(name, [])) != expected
    inconsistent = 0
    for checkpoint in checkpoints:
        tables = {
            name: _rows_at(root, path, version)
            for name, (path, version) in index[checkpoint].items()
        }
        if checkpoint == checkpoints[-1]:
            for name, rows in tables.items():
                if _normalised(rows) != _normalised(newest.get(name, [])):
                    raise AssertionError(f"delta-rs and delta-spark read {name} differently")
        if ORDERS in tables and ITEMS in tables:
            inconsistent += bool(invariant_violations(tables[ORDERS], tables[ITEMS]))
    return MirrorOutcome(mismatched, inconsistent, gaps, len(checkpoints), crashes)


def _kill_at_random(args: list[str], seconds: float) -> int:
    """Run a driver and SIGKILL its whole session after ``seconds`` (if still running)."""
    process = crash.start_driver(args, None)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:  # still running: the kill is the point
        crash._reap_session(process.pid)
    return crash.finish_driver(process, None)


def run_mirror_crashes(
    spark: Any,
    workdir: Path,
    seed: int,
    random_kills: int = 2,
    points: tuple[str, ...] = PROTOCOL_FAULTS,
    first_batch: int = 1,
) -> MirrorOutcome:
    """Kill a mirror driver at ``points`` (one batch after another), then at random; verify."""
    log, root, checkpoint = workdir / "log", workdir / "shop", workdir / "ckpt"
    workload = make_shop_log(log, seed)
    # The write tasks find the rows each batch replaces, however small the mirrors: kills
    # then also fall between their look and the publish that uses it.
    settings = Settings(sink={"mode": "mirror", "executorMarksMinFiles": "0"})
    args = ["-m", "harness.faults.crash", "drive", str(log), str(root), str(checkpoint)]
    crashes = 0
    for offset, point in enumerate(points):
        fault = f"{point}:{first_batch + offset}"
        status = crash.run_killable([*args, settings.to_json()], fault)
        if status != -signal.SIGKILL:
            raise RuntimeError(f"the fault {fault} never fired (the log may be too short)")
        crashes += 1
    rng = random.Random(seed)
    for _ in range(random_kills):
        began = time.monotonic()
        status = _kill_at_random([*args, settings.to_json()], rng.uniform(12.0, 25.0))
        crashes += status == -signal.SIGKILL
        if status == 0 and time.monotonic() - began < 5:
            break  # finished: nothing left to kill
    if crash.run_killable([*args, settings.to_json()], None) != 0:
        raise RuntimeError("the clean run was killed")
    return verify_mirrors(spark, root, workload, crashes)
