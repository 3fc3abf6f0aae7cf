"""Kill a mysql -> delta-2pc driver in its snapshot and mid-stream: nothing lost or repeated.

``run_scenario(server, database, workdir)`` runs driver processes on one checkpoint, each a
bounded query (``Trigger.availableNow``: to the binlog's end when it starts) with
``snapshot=initial`` over tables that hold rows: one SIGKILLed (with its JVM and Python workers)
while its snapshot reads the tables, one SIGKILLed once the snapshot's batch 0 is pre-committed,
before Spark completes it, one that delivers the same spill again, goes on into the binlog and is
SIGKILLed once its second stream batch is pre-committed while transactions are committed beside
it, and a clean one to the end in the caller's session, which reads that batch again from its
logged offsets (``replan``) and goes on. Then
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
from typing import TYPE_CHECKING, Any

from harness.faults import crash
from harness.workloads import mysql as workload
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint

if TYPE_CHECKING:
    from harness.servers.mariadb import MariaDbServer

CAP = 20
PASSWORD_VARIABLE = "SPARK_CKPT_TEST_MYSQL_PASSWORD"
"""The password reaches the driver in its environment, not its command line (``ps`` shows that)."""


def stream_once(
    spark: Any, server: dict[str, str], database: str, table: str, checkpoint: str
) -> None:
    """One availableNow query to the binlog's end, in ``spark`` (a fault may kill it first).

    ``server``: the ``host``, ``port``, ``user`` and ``password`` options.
    """
    import spark_ckpt

    control = spark_ckpt.install(spark)
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "mysql")
        .options(**server)
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
        raise RuntimeError("the query did not finish within 10 minutes")


def drive(host: str, port: str, user: str, database: str, table: str, checkpoint: str) -> None:
    """The driver process: :func:`stream_once` in a session of its own (a fault may kill it)."""
    import spark_ckpt

    spark = spark_ckpt.local_session("mysql-crash-driver")
    server = {"host": host, "port": port, "user": user, "password": os.environ[PASSWORD_VARIABLE]}
    stream_once(spark, server, database, table, checkpoint)
    spark.stop()


def run_scenario(spark: Any, server: MariaDbServer, database: str, workdir: Path) -> list[str]:
    """Run the drivers and the workload; return what is wrong with the change log (empty: ok).

    The killed drivers are processes of their own; the clean run to the end is in ``spark``
    (a session with the sources installed), as a restarted application's would be: recovery
    reads only the checkpoint, which does not tell a new process from a new query.
    """
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
    # 20 transactions are about 80 changes (4 a transaction on average), 4 batches of CAP: the
    # next run completes the snapshot's batch 0 again, plans batches 1 and 2 from them and is
    # killed once batch 2 is pre-committed.
    committed += workload.run_transactions(server, database, 20, seed=3)
    if SparkCheckpoint(str(checkpoint)).latest_committed() is not None:
        raise RuntimeError("the snapshot's batch completed although its run was killed")
    committed += _during(server, database, lambda: driver("after_manifest:2"), seed=2)
    # After the workload: reads the killed batch 2 again, then the rest of the 20 and the 10
    # committed beside the killed driver, about 5 batches (checkpoints) in all.
    reach = {"host": server.host, "port": str(server.port), "user": server.user}
    stream_once(spark, reach | {"password": server.password}, database, str(table), str(checkpoint))
    return workload.verify(table, server, database, committed)


def _during(server: MariaDbServer, database: str, run: Callable[[], None], seed: int) -> int:
    """Commit 10 transactions while ``run()`` runs a driver; how many committed."""
    done: list[int] = []
    writer = threading.Thread(
        target=lambda: done.append(workload.run_transactions(server, database, 10, seed))
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
