"""What the huge-transaction benchmarks share: peak memory by process role, a whole delivery.

:class:`MemoryWatch` samples every process of a run (this Python driver, Spark's JVM, the Python
process that runs a source's planning, the Python workers that decode partitions) from ``/proc``
for its peak resident memory (``VmHWM``); :func:`watched_run` times one query under it;
:func:`check_delivered_whole` checks that a transaction landed whole: one Delta version holds all
its rows, with one txn_id, txn_size = rows and every event index once. Linux only (``/proc``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


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


def measured_run(
    spark: Any, control: Any, start: Callable[[], Any], table: str, rows: int, buffer: str
) -> dict[str, Any]:
    """Run the query that delivers the huge transaction, watched; check it landed whole.

    Returns the result fields both benchmarks print (seconds, rate, versions, memory peaks).
    """
    seconds, peaks = watched_run(control, start)
    return {
        "rows": rows,
        "seconds": round(seconds, 1),
        "changes_per_s": round(rows / seconds),
        "versions_with_txn": check_delivered_whole(spark, table, rows),
        "stream_buffer_size": buffer,
        "peak_rss_mb": peaks,
    }


def watched_run(control: Any, start: Callable[[], Any]) -> tuple[float, dict[str, float]]:
    """Start a query and wait for it under a :class:`MemoryWatch`: (seconds, peaks)."""
    watch = MemoryWatch()
    watch.start()
    started = time.monotonic()
    run = start()
    if not control.await_termination(run, 3600):
        raise SystemExit("the huge transaction was not delivered within an hour")
    seconds = time.monotonic() - started
    return seconds, watch.stop()


def check_delivered_whole(spark: Any, table: str, rows: int) -> int:
    """The Delta versions holding the one updating transaction of ``rows`` changes (whole).

    Raises ``SystemExit`` when it did not land whole and once.
    """
    from delta.tables import DeltaTable

    frame = spark.read.format("delta").load(table).where("op = 'u'")
    txns = frame.select("txn_id", "txn_size").distinct().collect()
    if len(txns) != 1 or txns[0].txn_size != rows or frame.count() != rows:
        raise SystemExit(f"the transaction did not land whole: {txns}")
    txn_id = txns[0].txn_id
    versions = 0
    for entry in DeltaTable.forPath(spark, table).history().collect():
        at = spark.read.format("delta").option("versionAsOf", entry.version).load(table)
        held = at.where(f"txn_id = '{txn_id}'").count()
        if held not in (0, rows):
            raise SystemExit(f"version {entry.version} holds {held} of {rows} rows")
        versions += 1 if held == rows else 0
    distinct = frame.select("event_index").distinct().count()
    if distinct != rows:
        raise SystemExit(f"{distinct} distinct event indexes for {rows} changes")
    return versions
