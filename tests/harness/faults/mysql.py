"""Kill a mysql -> delta-2pc driver in its snapshot and mid-stream: nothing lost or repeated.

``run_scenario(server, database, workdir)`` runs driver processes on one checkpoint, each a
bounded query (``Trigger.availableNow``: to the binlog's end when it starts) with
``snapshot=initial`` over tables that hold rows: one SIGKILLed (with its JVM and Python workers)
while its snapshot reads the tables, one SIGKILLed once the snapshot's batch 0 is pre-committed,
before Spark completes it, one that delivers the same spill again, goes on into the binlog and is
SIGKILLed once its second stream batch is pre-committed while transactions are committed beside
it, and a clean one to the end, which reads that batch again from its logged offsets
(``replan``) and goes on. Then
:func:`harness.workloads.mysql.verify` checks the change log. Run as a module
(``python -m harness.faults.mysql drive HOST PORT USER DATABASE TABLE CHECKPOINT``, the password
in ``SPARK_CKPT_TEST_MYSQL_PASSWORD``) it is the driver itself.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from harness.faults import crash
from harness.workloads import mysql as workload
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint

if TYPE_CHECKING:
    from harness.servers.mariadb import MariaDbServer

CAP = 20
PASSWORD_VARIABLE = "SPARK_CKPT_TEST_MYSQL_PASSWORD"
"""The password reaches the driver in its environment, not its command line (``ps`` shows that)."""


def drive(host: str, port: str, user: str, database: str, table: str, checkpoint: str) -> None:
    """The driver: an availableNow query to the binlog's end (a fault may kill it first)."""
    import spark_ckpt

    spark = spark_ckpt.local_session("mysql-crash-driver")
    control = spark_ckpt.install(spark)
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "mysql")
        .option("host", host)
        .option("port", port)
        .option("user", user)
        .option("password", os.environ[PASSWORD_VARIABLE])
        .option("serverId", "7201")
        .option("snapshot", "initial")
        .option("snapshotDir", f"{checkpoint}-snapshot")
        .option("tables", ",".join(f"{database}.{name}" for name in workload.KEYS))
        .option("maxChangesPerTrigger", str(CAP))
        .load()
        .writeStream.format("delta-2pc")
        .option("path", table)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    if not control.await_termination(query, 600):
        raise SystemExit("the query did not finish within 10 minutes")
    spark.stop()


def run_scenario(server: MariaDbServer, database: str, workdir: Path) -> list[str]:
    """Run the drivers and the workload; return what is wrong with the change log (empty: ok)."""
    table, checkpoint = workdir / "table", workdir / "ckpt"
    workload.create_tables(server, database)
    args = ["-m", "harness.faults.mysql", "drive", server.host, str(server.port), server.user]
    args += [database, str(table), str(checkpoint)]

    def driver(fault: str | None) -> None:
        status = crash.run_killable(args, fault, **{PASSWORD_VARIABLE: server.password})
        if fault and status != -signal.SIGKILL:
            raise RuntimeError(f"the fault {fault} never fired")
        if not fault and status != 0:
            raise RuntimeError("a clean run was killed")

    workload.run_transactions(server, database, 60, seed=9)  # rows for the snapshot to read
    driver("during_snapshot:0")  # killed once the first table is spilled
    driver("after_manifest:0")  # the snapshot's batch pre-committed, not completed
    committed = 1  # the snapshot: one unit
    committed += workload.run_transactions(server, database, 80, seed=3)
    # The next run completes the snapshot's batch 0 again, then the second batch it plans (of
    # these 80) is killed once pre-committed.
    if SparkCheckpoint(str(checkpoint)).latest_committed() is not None:
        raise RuntimeError("the snapshot's batch completed although its run was killed")
    committed += _during(server, database, lambda: driver("after_manifest:2"), seed=2)
    driver(None)  # after the workload: reads the killed batch again, then everything after it
    return workload.verify(table, server, database, committed)


def _during(server: MariaDbServer, database: str, run: Callable[[], None], seed: int) -> int:
    """Commit 40 transactions while ``run()`` runs a driver; how many committed."""
    done: list[int] = []
    writer = threading.Thread(
        target=lambda: done.append(workload.run_transactions(server, database, 40, seed))
    )
    writer.start()
    try:
        run()
    finally:
        writer.join(300)
    if writer.is_alive() or not done:
        raise RuntimeError("the workload beside the driver did not finish")
    return done[0]


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "drive":
        drive(*sys.argv[2:])
    else:
        raise SystemExit(
            "usage: python -m harness.faults.mysql drive HOST PORT USER DATABASE TABLE CHECKPOINT"
        )
