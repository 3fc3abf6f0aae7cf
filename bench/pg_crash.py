"""Kill a supervised postgres -> delta-2pc driver during the snapshot and mid-stream, restart it.

``run_scenario(spark, dsn, workdir)`` creates the workload's tables, starts the workload on a
thread, runs a driver process that is SIGKILLed (with its JVM and Python workers) while the
snapshot is being spilled, one that redoes the snapshot (``Trigger.availableNow`` ends where the
WAL was when it started, which the new snapshot covers), one that is killed after a stream batch's
manifest (before Spark completes the batch), and after the workload ends a clean driver to the
end. Then
:func:`pg_workload.verify` checks every transaction landed whole in exactly one Delta version and
that the changelog replays to the PostgreSQL tables. Run as a script (``pg_crash.py drive DSN
TABLE CHECKPOINT SPILL``) it is the driver itself.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import crash_harness
import pg_workload

CAP = 40
RUNS: list[str | None] = [
    "during_snapshot:1",  # killed when two of the four tables are spilled
    "",  # redoes the snapshot and runs to its availableNow target
    "after_manifest:2",  # killed when a stream batch is pre-committed, commits/2 not written
    None,  # after the workload ended: runs to the end
]


def drive(dsn: str, table: str, checkpoint: str, spill: str) -> None:
    """The driver: a supervised availableNow query to the end (a fault may kill it first)."""
    import spark_ckpt

    spark = spark_ckpt.local_session("pg-crash-driver")
    control = spark_ckpt.install(spark)

    def build() -> Any:
        return (
            spark.readStream.format("txn-cdc")
            .option("connector", "postgres")
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


def run_scenario(spark: Any, dsn: str, workdir: Path, transactions: int = 600) -> tuple[Any, int]:
    """Run the kills and the clean run; return (verdict, kills)."""
    table, checkpoint, spill = workdir / "table", workdir / "ckpt", workdir / "spill"
    pg_workload.create_schema(dsn)
    # Spread over the drivers' lifetimes (each takes seconds to start Spark).
    workload = pg_workload.Workload(dsn, transactions=transactions, seed=7, pause=0.05).start()
    kills = 0
    for fault in RUNS:
        if fault is None:
            workload.join(600)  # the clean run must see the whole workload
        args = [__file__, "drive", dsn, str(table), str(checkpoint), str(spill)]
        status = crash_harness.run_killable(args, fault or None)
        if fault and status != -signal.SIGKILL:
            raise RuntimeError(f"the fault {fault} never fired")
        if not fault and status != 0:
            raise RuntimeError("a clean run was killed")
        kills += bool(fault)
    verdict = pg_workload.verify(spark, str(table), dsn, workload.committed)
    return verdict, kills


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "drive":
        drive(*sys.argv[2:])
    else:
        raise SystemExit("usage: pg_crash.py drive DSN TABLE CHECKPOINT SPILL")
