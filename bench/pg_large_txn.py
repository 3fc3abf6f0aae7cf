"""Benchmark: one huge transaction (a bulk UPDATE) through the postgres connector, memory watched.

Starts a throwaway PostgreSQL cluster, fills a table with ``--rows`` rows, creates a slot
(``snapshot=never``), runs ``UPDATE big SET v = ...`` over every row in one transaction, and
streams it with ``Trigger.availableNow`` into ``delta-2pc``, once per plugin. While it runs, every
process of the run (this Python driver, Spark's JVM, the Python process that runs the source's
planning, the Python workers that decode partitions) is sampled from ``/proc`` for its peak
resident memory (``VmHWM``). Checks that the transaction landed whole: one Delta version holds
all its rows, with one txn_id, txn_size = rows and every event index once.

Prints one JSON line per plugin::

    {"bench": "pg_large_txn", "plugin": "pgoutput", "rows": 3000000, "seconds": 180.2,
     "versions_with_txn": 1, "stream_buffer_size": 268435456,
     "peak_rss_mb": {"source_planner": 610.0, "python_worker_max": 240.1, ...}}

Linux only (``/proc``). Run: ``scripts/bench.sh pg_large_txn`` (or ``python bench/pg_large_txn.py
--rows 3000000``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness.servers.postgres import PgCluster


def _status_kb(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


class MemoryWatch(threading.Thread):
    """Samples the peak RSS of this process and all its descendants, by role, until stopped."""

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peaks: dict[int, tuple[str, int]] = {}
        self._done = threading.Event()

    def _role(self, pid: int, parent_role: str) -> str:
        line = _cmdline(pid)
        if pid == os.getpid():
            return "bench_driver"
        if "java" in line.split(" ", 1)[0]:
            return "jvm"
        if "pyspark.daemon" in line:
            # The daemon forks the workers, which keep its command line.
            return "python_worker" if parent_role == "python_daemon" else "python_daemon"
        if "python" in line:
            return "source_planner" if parent_role == "jvm" else "python_other"
        return "other"

    def sample(self) -> None:
        """Record the peak RSS of every process below this one."""
        todo = [(os.getpid(), "")]
        while todo:
            pid, parent_role = todo.pop()
            role = self._role(pid, parent_role)
            peak = _status_kb(pid, "VmHWM")
            if peak is not None:
                known = self.peaks.get(pid)
                self.peaks[pid] = (role, max(peak, known[1] if known else 0))
            todo += [(child, role) for child in _children(pid)]

    def run(self) -> None:
        """Sample every ``interval`` seconds until :meth:`stop`."""
        while not self._done.wait(self.interval):
            self.sample()

    def stop(self) -> dict[str, float]:
        """Stop sampling; return the peak RSS in MB by role (the largest process of each)."""
        self._done.set()
        self.join(5)
        self.sample()
        by_role: dict[str, float] = {}
        for role, kb in self.peaks.values():
            by_role[role] = max(by_role.get(role, 0.0), round(kb / 1024, 1))
        return {
            f"{role}_max" if role == "python_worker" else role: mb
            for role, mb in sorted(by_role.items())
        }


def run_one(
    spark: Any, control: Any, dsn: str, plugin: str, rows: int, workdir: Path, buffer: str
) -> dict[str, Any]:
    import psycopg
    from delta.tables import DeltaTable

    slot = f"large_{plugin}"
    table, checkpoint, spill = (
        workdir / f"table_{plugin}",
        workdir / f"ckpt_{plugin}",
        workdir / f"spill_{plugin}",
    )

    def query() -> Any:
        return (
            spark.readStream.format("txn-cdc")
            .option("connector", "postgres")
            .option("plugin", plugin)
            .option("dsn", dsn)
            .option("slot", slot)
            .option("tables", "public.big")
            .option("snapshot", "never")
            .option("snapshotDir", str(spill))
            .option("streamBufferSize", buffer)
            .load()
            .writeStream.format("delta-2pc")
            .option("path", str(table))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    first = query()
    if not control.await_termination(first, 600):
        raise SystemExit("the first run (slot creation) did not finish")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE big SET v = md5(v) || id::text")
    watch = MemoryWatch()
    watch.start()
    started = time.monotonic()
    run = query()
    if not control.await_termination(run, 3600):
        raise SystemExit("the huge transaction was not delivered within an hour")
    seconds = time.monotonic() - started
    peaks = watch.stop()
    frame = spark.read.format("delta").load(str(table)).where("op = 'u'")
    txns = frame.select("txn_id", "txn_size").distinct().collect()
    if len(txns) != 1 or txns[0].txn_size != rows or frame.count() != rows:
        raise SystemExit(f"the transaction did not land whole: {txns}")
    txn_id = txns[0].txn_id
    versions = 0
    for entry in DeltaTable.forPath(spark, str(table)).history().collect():
        at = spark.read.format("delta").option("versionAsOf", entry.version).load(str(table))
        held = at.where(f"txn_id = '{txn_id}'").count()
        if held not in (0, rows):
            raise SystemExit(f"version {entry.version} holds {held} of {rows} rows")
        versions += 1 if held == rows else 0
    distinct = frame.select("event_index").distinct().count()
    if distinct != rows:
        raise SystemExit(f"{distinct} distinct event indexes for {rows} changes")
    return {
        "bench": "pg_large_txn",
        "plugin": plugin,
        "rows": rows,
        "seconds": round(seconds, 1),
        "changes_per_s": round(rows / seconds),
        "versions_with_txn": 1 if versions else 0,
        "stream_buffer_size": buffer,
        "peak_rss_mb": peaks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=3_000_000)
    parser.add_argument("--plugins", default="pgoutput,wal2json")
    parser.add_argument("--buffer", default="256m", help="option streamBufferSize")
    args = parser.parse_args()

    import psycopg

    import spark_ckpt

    workdir = Path(tempfile.mkdtemp(prefix="pg-large-"))
    cluster = PgCluster(tempfile.mkdtemp(prefix="pg-large-server-")).start()
    try:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE big (id int PRIMARY KEY, v text)")
            conn.execute(
                "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, %s) g", (args.rows,)
            )
        spark = spark_ckpt.local_session("pg-large-txn")
        control = spark_ckpt.install(spark)
        for plugin in args.plugins.split(","):
            print(
                json.dumps(run_one(spark, control, dsn, plugin, args.rows, workdir, args.buffer)),
                flush=True,
            )
        spark.stop()
    finally:
        cluster.stop()
        shutil.rmtree(cluster.workdir, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
