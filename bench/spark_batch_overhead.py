"""Spark's fixed cost per micro-batch on a local checkpoint, and the settings that cut it.

Every micro-batch writes an offset log file and a commit log file. On a local checkpoint,
Hadoop's local file system (without its native library, which PySpark does not ship) starts a
``chmod`` process for every file it creates with a permission, and Spark's default checkpoint
file manager (``FileContext``-based) asks for each file's link status, which starts a
``stat``/``readlink`` process. This bench runs the same query, many tiny batches of Spark's own
``rate-micro-batch`` source into ``noop`` (no Python, nothing to decode), under each setting in
a fresh Spark driver, and reports per batch: the median ``triggerExecution``, ``walCommit``
(the offset log) and ``commitOffsets`` (the commit log) in ms, and the processes the machine
started (``/proc/stat``'s ``processes`` counter).

Settings:

- ``default``;
- ``fs_manager``: ``spark.sql.streaming.checkpointFileManagerClass`` set to Spark's
  ``FileSystemBasedCheckpointFileManager`` (writes a temporary file and renames it, through the
  ``FileSystem`` API);
- ``raw_local``: ``spark.hadoop.fs.file.impl`` set to ``RawLocalFileSystem`` (no ``.crc``
  checksum files beside each log file);
- ``both``.

Prints one JSON line. Run: ``scripts/bench.sh spark_batch_overhead``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS: dict[str, dict[str, str]] = {
    "default": {},
    "fs_manager": {
        "spark.sql.streaming.checkpointFileManagerClass": (
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager"
        ),
    },
    "raw_local": {
        "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
        "spark.hadoop.fs.file.impl.disable.cache": "true",
    },
}
SETTINGS["both"] = {**SETTINGS["fs_manager"], **SETTINGS["raw_local"]}


def processes_started() -> int:
    """Processes the machine has started since boot (``/proc/stat``)."""
    with open("/proc/stat") as stat:
        for line in stat:
            if line.startswith("processes "):
                return int(line.split()[1])
    raise RuntimeError("no 'processes' line in /proc/stat")


def measure(setting: str, batches: int) -> dict[str, float]:
    """Run ``batches`` tiny batches under ``setting`` (in this process's own Spark driver)."""
    from spark_ckpt import local_session

    spark = local_session(f"bench-batch-overhead-{setting}", conf=SETTINGS[setting])
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        for run in ("warmup", "measured"):
            query = (
                spark.readStream.format("rate-micro-batch")
                .option("rowsPerBatch", "10")
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", str(Path(tmp) / run))
                .trigger(processingTime="0 seconds")
                .start()
            )
            wanted = batches if run == "measured" else 10
            started = processes_started()
            deadline = time.monotonic() + 600
            while len([p for p in query.recentProgress if p["numInputRows"]]) < wanted:
                if time.monotonic() > deadline:
                    query.stop()
                    raise SystemExit(f"{setting}: fewer than {wanted} batches in 10 minutes")
                time.sleep(0.05)
            query.stop()
            forked = processes_started() - started
        progress = [p for p in query.recentProgress if p["numInputRows"]][:batches]
    spark.stop()

    def median(key: str) -> float:
        return statistics.median(float(p["durationMs"].get(key, 0)) for p in progress)

    return {
        "trigger_ms": median("triggerExecution"),
        "wal_commit_ms": median("walCommit"),
        "commit_offsets_ms": median("commitOffsets"),
        "processes_per_batch": round(forked / len(progress), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--setting", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setting:  # one setting, in a fresh driver: print its figures
        print(json.dumps(measure(args.setting, args.batches)), flush=True)
        return
    figures = {}
    for setting in SETTINGS:
        out = subprocess.run(
            [sys.executable, __file__, "--setting", setting, "--batches", str(args.batches)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        figures[setting] = json.loads(out.strip().splitlines()[-1])
    print(json.dumps({"bench": "spark_batch_overhead", "batches": args.batches, **figures}))


if __name__ == "__main__":
    main()
