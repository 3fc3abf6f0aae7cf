"""A mirror's merge-on-read apply on a standalone cluster: where its per-file work runs.

The tests' cluster (:class:`harness.servers.spark_cluster.SparkCluster`: a master and two
workers of one core each on loopback; their executors run this virtualenv's Python) runs
``bench/mirror_apply.py``'s workload at ``--rows``, through two pipelines one after the other:

- **mirror_dv_tasks**: the write tasks find the stored rows each batch replaces
  (``executorMarksMinFiles=0``);
- **mirror_dv_driver**: the publisher reads every candidate file on the driver.

For each, Spark's event log gives every task of the timed change batches (``SparkListenerTaskEnd``:
executor, run time, CPU time), and the mirror's Delta history says, per batch, how many files the
publisher read on the driver (``filesRead``) and how many the write tasks read on the executors
(``filesReadByTasks``). Prints one JSON line per pipeline and a summary line.

Run: ``.venv/bin/python bench/mirror_apply_cluster.py [--rows 2000000] [--batches 5]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from mirror_apply import (
    LOADED_BY_PIPELINE,
    TABLE,
    _copy_files,
    bulk_load,
    make_logs,
    run_mirror,
)

import spark_ckpt
from harness.servers.spark_cluster import SparkCluster

PIPELINES = ("mirror_dv_tasks", "mirror_dv_driver")


def _tasks(event_dir: Path, began_ms: int, ended_ms: int) -> list[dict[str, Any]]:
    """Every task that ran between the two times, from the application's event log."""
    tasks = []
    # Spark 4 rolls event logs by default: a directory of files per application (eventlog_v2_*).
    for log in sorted(p for p in event_dir.rglob("*") if p.is_file()):
        for line in log.read_text().splitlines():
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if event.get("Event") != "SparkListenerTaskEnd":
                continue
            info, metrics = event["Task Info"], event.get("Task Metrics") or {}
            if not began_ms <= info["Launch Time"] <= ended_ms:
                continue
            tasks.append(
                {
                    "stage": event["Stage ID"],
                    "executor": info["Executor ID"],
                    "host": info["Host"],
                    "run_ms": metrics.get("Executor Run Time", 0),
                    "cpu_ms": metrics.get("Executor CPU Time", 0) // 1_000_000,
                }
            )
    return tasks


def _applies(table: Path, first_version: int) -> list[dict[str, int]]:
    """The mirror's batch commits after ``first_version``: files read on each side."""
    found = []
    for entry in DeltaTable(str(table)).history():
        if entry["version"] <= first_version or "spark-ckpt.mirror.filesRead" not in entry:
            continue
        found.append(
            {
                "driver": int(entry["spark-ckpt.mirror.filesRead"]),
                "tasks": int(entry.get("spark-ckpt.mirror.filesReadByTasks", 0)),
            }
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=2_000, help="changes per batch")
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as scratch:
        work = Path(scratch)
        events = work / "events"
        events.mkdir()
        cluster = SparkCluster(work / "cluster").start()
        try:
            conf = {
                **cluster.driver_conf(),
                "spark.eventLog.enabled": "true",
                "spark.eventLog.dir": str(events),
                "spark.eventLog.compress": "false",  # plain JSON lines, whatever the default
            }
            spark = spark_ckpt.local_session("bench-mirror-cluster", master=cluster.url, conf=conf)
            control = spark_ckpt.install(spark)
            make_logs(work / "load", work / "changes", args.rows, args.batches, args.batch, 0, 0)
            windows: dict[str, tuple[float, float, list[dict[str, int]]]] = {}
            for name in PIPELINES:
                log = work / f"log-{name}"
                log.mkdir()
                _copy_files(work / "load", log, 0)
                run_mirror(spark, control, log, work, 10_000, name)
                table = work / name / TABLE
                bulk_load(spark, table, LOADED_BY_PIPELINE, args.rows, 0)
                loaded = DeltaTable(str(table)).version()
                _copy_files(work / "changes", log, 1)
                began = time.time()
                run_mirror(spark, control, log, work, args.batch, name)
                windows[name] = (began, time.time(), _applies(table, loaded))
            spark.stop()  # the event log is complete (and flushed) once the application ends
        finally:
            cluster.stop()
        lines = []
        for name, (began, ended, applies) in windows.items():
            tasks = _tasks(events, int(began * 1000), int(ended * 1000))
            by_executor: dict[str, int] = {}
            for task in tasks:
                by_executor[task["executor"]] = by_executor.get(task["executor"], 0) + 1
            lines.append(
                {
                    "bench": "mirror_apply_cluster",
                    "pipeline": name,
                    "rows": args.rows,
                    "batches": args.batches,
                    "batch_changes": args.batch,
                    "seconds_per_batch": round((ended - began) / args.batches, 3),
                    "tasks_by_executor": by_executor,
                    "task_run_s": round(sum(t["run_ms"] for t in tasks) / 1000, 2),
                    "task_cpu_s": round(sum(t["cpu_ms"] for t in tasks) / 1000, 2),
                    "files_read_on_driver": [a["driver"] for a in applies],
                    "files_read_by_tasks": [a["tasks"] for a in applies],
                }
            )
            print(json.dumps(lines[-1]), flush=True)
    by_name = {line["pipeline"]: line for line in lines}
    summary = {
        "bench": "mirror_apply_cluster",
        "summary": True,
        "rows": args.rows,
        "driver_over_executors_seconds": round(
            by_name["mirror_dv_driver"]["seconds_per_batch"]
            / by_name["mirror_dv_tasks"]["seconds_per_batch"],
            2,
        ),
        "median_files_read_on_driver": {
            name: statistics.median(line["files_read_on_driver"] or [0])
            for name, line in by_name.items()
        },
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
