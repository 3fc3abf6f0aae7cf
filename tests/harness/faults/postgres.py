"""Kill a supervised postgres -> delta-2pc driver during the snapshot and mid-stream, restart it.

``run_scenario(spark, dsn, workdir)`` creates the workload's tables and runs four driver
processes on one checkpoint: one SIGKILLed (with its JVM and Python workers) while the snapshot is
being spilled, one that redoes the snapshot (``Trigger.availableNow`` ends where the WAL was when
it started, which the new snapshot covers), one killed after a stream batch's manifest (before
Spark completes the batch) while a workload runs concurrently, and a clean one to the end. Then
:func:`harness.workloads.postgres.verify` checks every transaction landed whole in exactly one
Delta version and that the changelog replays to the PostgreSQL tables. Run as a module
(``python -m harness.faults.postgres drive DSN TABLE CHECKPOINT SPILL PLUGIN``) it is the driver
itself.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

from harness.faults import crash
from harness.workloads import postgres as pg_workload

CAP = 40


def drive(dsn: str, table: str, checkpoint: str, spill: str, plugin: str) -> None:
    """The driver: a supervised availableNow query to the end (a fault may kill it first)."""
    import spark_ckpt

    spark = spark_ckpt.local_session("pg-crash-driver")
    control = spark_ckpt.install(spark)

    def build() -> Any:
        return (
            spark.readStream.format("txn-cdc")
            .option("connector", "postgres")
            .option("plugin", plugin)
            .option("dsn", dsn)
            .option("slot", "crash_cdc")
            .option("tables", ",".join(pg_workload.TABLES))
            .option("snapshotDir", spill)
            .option("maxChangesPerTrigger", str(CAP))
            .load()
            .writeStream.format("delta-2pc")
            .option("path", table)
            .trigger(availableNow=True)
        )

    query = control.supervise(build, checkpoint_location=checkpoint, name="pg-crash")
    if not query.await_termination(600):
        raise SystemExit("the supervised query did not finish within 10 minutes")
    spark.stop()


def run_scenario(spark: Any, dsn: str, workdir: Path, plugin: str = "wal2json") -> tuple[Any, int]:
    """Run the kills and the clean runs; return (verdict, kills).

    The workload is phased so that every kill point is reached whatever the machine's speed:
    transactions committed before the first driver (the snapshot's material), between the
    snapshot run and the mid-stream kill (at least a few stream batches for it), and during the
    last two drivers (concurrent with the kill and the recovery).
    """
    table, checkpoint, spill = workdir / "table", workdir / "ckpt", workdir / "spill"
    pg_workload.create_schema(dsn)

    def workload(transactions: int, seed: int, pause: float = 0.0) -> pg_workload.Workload:
        return pg_workload.Workload(dsn, transactions=transactions, seed=seed, pause=pause).start()

    def driver(fault: str | None) -> None:
        args = ["-m", "harness.faults.postgres", "drive", dsn, str(table), str(checkpoint)]
        status = crash.run_killable([*args, str(spill), plugin], fault)
        if fault and status != -signal.SIGKILL:
            raise RuntimeError(f"the fault {fault} never fired")
        if not fault and status != 0:
            raise RuntimeError("a clean run was killed")

    before = workload(100, seed=5)
    before.join(300)
    driver("during_snapshot:1")  # killed when two of the four tables are spilled
    driver(None)  # redoes the snapshot; availableNow ends where the WAL was when it started
    middle = workload(150, seed=6)
    middle.join(300)
    during = workload(300, seed=7, pause=0.02)
    driver("after_manifest:2")  # killed when stream batch 2 is pre-committed, before commits/2
    during.join(600)
    driver(None)  # after the workload ended: runs to the end
    committed = before.committed + middle.committed + during.committed
    verdict = pg_workload.verify(spark, str(table), dsn, committed)
    return verdict, 2


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "drive":
        drive(*sys.argv[2:])
    else:
        raise SystemExit(
            "usage: python -m harness.faults.postgres drive DSN TABLE CHECKPOINT SPILL PLUGIN"
        )
