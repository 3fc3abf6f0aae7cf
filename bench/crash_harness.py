"""Crash harness: run txn-cdc -> delta-2pc drivers that are SIGKILLed at protocol points.

Each scenario runs the same bounded query (``Trigger.availableNow``) on one checkpoint location
several times: the first runs with ``SPARK_CKPT_FAULT`` armed, so the whole driver process group
(driver, JVM, Python workers) is SIGKILLed at that point; the last runs clean to the end. Then
delta-spark reads every version of the table and counts source transactions lost, duplicated,
or visible in part ("torn") in any version.

Used by ``bench/crash_matrix.py`` and ``tests/integration/test_crash_recovery.py``. Run as a
script (``crash_harness.py drive LOG TABLE CKPT``) it is the driver itself.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CAP = 30
CRASH_BATCH = 2

# Fault specs per run; None is the final clean run.
SCENARIOS: dict[str, list[str | None]] = {
    "after_staging": [f"after_staging:{CRASH_BATCH}", None],
    "after_manifest": [f"after_manifest:{CRASH_BATCH}", None],
    "before_publish": [f"before_publish:{CRASH_BATCH}", None],
    "during_publish": [f"during_publish:{CRASH_BATCH}", None],
    # A re-run of the batch deletes the aborted attempt's files: crash in the middle of that.
    "during_abort": [f"after_manifest:{CRASH_BATCH}", f"during_abort:{CRASH_BATCH}", None],
    # The same kill under control.supervise() with a checkpoint hook: the restarted driver's
    # supervisor restores checkpoint CRASH_BATCH - 1 (discarding batch CRASH_BATCH's manifest
    # and staged files before the query starts) and hands the hook the data stored with it.
    "supervised_after_manifest": [f"after_manifest:{CRASH_BATCH}", None],
}
SUPERVISED = {"supervised_after_manifest"}
RESTORED_FILE = "hook-restored.jsonl"  # beside the checkpoint: what the hook was handed back


@dataclass
class Outcome:
    """What one scenario run found."""

    scenario: str
    lost: int
    duplicated: int
    torn: int
    versions: int
    crashes: int


def make_log(directory: Path, seed: int, transactions: int = 40) -> list[list[str]]:
    """Write a change log; return each transaction's change notes, in END order."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from spark_ckpt.testing.debezium_log import random_log, write_log

    rng = random.Random(seed)
    records, expected = random_log(rng, transactions, max_size=10, interleave=4)
    write_log(str(directory), records, sorted(rng.sample(range(len(records)), 3)))
    return [[e["after"]["note"] for e in txn.events] for txn in expected]


def _hook(checkpoint: str) -> Any:
    """A checkpoint hook storing ``"at <N>"`` and appending what it is handed back to a file."""
    from spark_ckpt.state.hooks import CheckpointHook

    class Recorder(CheckpointHook):
        identifier = "crash-recorder"

        def trigger(self, checkpoint_id: int, timestamp: float) -> bytes | None:
            return f"at {checkpoint_id}".encode()

        def restore(self, checkpoint_id: int, data: bytes | None) -> None:
            record = {"checkpoint": checkpoint_id, "data": None if data is None else data.decode()}
            path = Path(checkpoint).parent / RESTORED_FILE
            with path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")

    return Recorder()


def drive(log: str, table: str, checkpoint: str, supervised: bool = False) -> None:
    """The driver: stream the log into the table to the end (a fault may kill it first)."""
    import spark_ckpt

    spark = spark_ckpt.local_session("crash-driver")
    control = spark_ckpt.install(spark)

    def build() -> Any:
        return (
            spark.readStream.format("txn-cdc")
            .option("connector", "debezium-json")
            .option("maxChangesPerTrigger", str(CAP))
            .load(log)
            .writeStream.format("delta-2pc")
            .option("path", table)
            .trigger(availableNow=True)
        )

    if supervised:
        query = control.supervise(
            build, checkpoint_location=checkpoint, name="crash", hooks=[_hook(checkpoint)]
        )
        if not query.await_termination(600):
            raise SystemExit("the supervised query did not finish within 10 minutes")
    elif not control.await_termination(
        build().option("checkpointLocation", checkpoint).start(), 600
    ):
        raise SystemExit("the driver's query did not finish within 10 minutes")
    spark.stop()


def _reap_session(session: int) -> None:
    """Make sure no process of the driver's session outlives it (before the next run starts)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == session:
                    os.kill(int(entry), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue


def run_driver(
    log: Path, table: Path, checkpoint: Path, fault: str | None, supervised: bool = False
) -> int:
    """Run one driver in its own process group; return its exit status (-9: killed)."""
    mode = "drive-supervised" if supervised else "drive"
    return run_killable([__file__, mode, str(log), str(table), str(checkpoint)], fault)


def run_killable(args: list[str], fault: str | None) -> int:
    """Run ``python *args`` in a session of its own with ``fault`` armed; return its status."""
    env = dict(os.environ)
    env.pop("SPARK_CKPT_FAULT", None)
    if fault:
        env["SPARK_CKPT_FAULT"] = fault
    command = [sys.executable, *args]
    process = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, err = process.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        _reap_session(process.pid)
        raise
    _reap_session(process.pid)
    if process.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(
            f"driver (fault={fault}) exited with {process.returncode}:\n"
            + err.decode(errors="replace")[-4000:]
        )
    return process.returncode


def verify(spark: Any, table: Path, expected: list[list[str]]) -> tuple[int, int, int, int]:
    """Count (lost, duplicated, torn, versions) by reading every Delta version with delta-spark."""
    size_of = {note: len(txn) for txn in expected for note in txn}
    txn_of = {note: index for index, txn in enumerate(expected) for note in txn}
    versions = len(spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect())
    torn: set[int] = set()
    final: Counter[str] = Counter()
    for version in range(versions):
        frame = spark.read.format("delta").option("versionAsOf", version).load(str(table))
        notes = Counter(json.loads(row.after)["note"] for row in frame.select("after").collect())
        per_txn: dict[int, int] = defaultdict(int)
        for note in notes:
            per_txn[txn_of[note]] += 1
        torn |= {t for t, n in per_txn.items() if n != len(expected[t])}
        final = notes
    lost = sum(1 for txn in expected if any(final[note] == 0 for note in txn))
    duplicated = sum(1 for txn in expected if any(final[note] > 1 for note in txn))
    assert all(size_of[n] for n in final)
    return lost, duplicated, len(torn), versions


def run_scenario(spark: Any, name: str, workdir: Path, seed: int) -> Outcome:
    """Run one scenario in ``workdir``; the crashing runs must really crash."""
    log, table, checkpoint = workdir / "log", workdir / "table", workdir / "ckpt"
    expected = make_log(log, seed)
    crashes = 0
    for fault in SCENARIOS[name]:
        status = run_driver(log, table, checkpoint, fault, supervised=name in SUPERVISED)
        if fault is not None and status != -signal.SIGKILL:
            raise RuntimeError(f"scenario {name}: the fault {fault} never fired")
        if fault is None and status != 0:
            raise RuntimeError(f"scenario {name}: the clean run was killed")
        crashes += fault is not None
    lost, duplicated, torn, versions = verify(spark, table, expected)
    return Outcome(name, lost, duplicated, torn, versions, crashes)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] in ("drive", "drive-supervised"):
        drive(*sys.argv[2:], supervised=sys.argv[1] == "drive-supervised")
    else:
        raise SystemExit("usage: crash_harness.py drive|drive-supervised LOG TABLE CHECKPOINT")
