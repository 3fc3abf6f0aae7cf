"""Micro-batch latency of a small streaming query: from Spark's trigger to the published version.

What every user of a CDC pipeline feels: a transaction arrives, how long until a reader sees it.
One local session runs the same small query several times, each into a fresh table and
checkpoint: a Debezium-format log of ``--transactions`` transactions through ``txn-cdc``
(``maxChangesPerTrigger=--cap``, ``Trigger.availableNow``) into ``delta-2pc``. For every batch
the control plane's history gives when Spark triggered it (the progress event's ``timestamp``),
how long the trigger ran (``batchDuration``) and when the batch's Delta version was published
(the publisher's clock; both are this machine's wall clock). Per run the medians over its
batches; the verdict is the median over runs.

Also reported, medians over every batch: the progress event's ``durationMs`` parts (``addBatch``:
the tasks and the sink's commit; ``walCommit`` and ``commitOffsets``: Spark's offset and commit
logs; ``latestOffset`` and ``queryPlanning``), so a change shows where it moved the time.

Prints one JSON line. Run: ``scripts/bench.sh batch_latency`` (or
``.venv/bin/python bench/batch_latency.py --runs 5``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import spark_ckpt
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.testing.debezium_log import random_log, write_log

PARTS = ("addBatch", "walCommit", "commitOffsets", "latestOffset", "queryPlanning")


def _seconds(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def run_once(
    spark: Any, control: spark_ckpt.Control, log: Path, work: Path, cap: int
) -> tuple[float, list[float], list[float], list[dict[str, Any]]]:
    """One query over the log; seconds from ``start()`` to its first published batch.

    Also per batch (oldest first) seconds from trigger to published and of the trigger, and
    the query's progress events.
    """
    table, checkpoint = work / "table", work / "ckpt"
    started = time.time()
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", str(cap))
        .load(str(log))
        .writeStream.format("delta-2pc")
        .option("path", str(table))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    if not control.await_termination(query, 600):
        query.stop()
        raise RuntimeError("the query did not finish within 600 s")
    # Spark keeps the newest 100 progress events; these runs have about 50.
    progress = [json.loads(p.json) for p in query.recentProgress]
    to_published: list[float] = []
    triggers: list[float] = []
    first_published = 0.0
    for record in HistoryLog(SparkCheckpoint(str(checkpoint))).records():
        if record.triggered_at is None or record.published_at is None or not record.rows:
            continue
        to_published.append(record.published_at - _seconds(record.triggered_at))
        if not to_published[1:]:  # the first batch with rows: also from start() on
            first_published = record.published_at - started
        if record.duration_ms is not None:
            triggers.append(record.duration_ms / 1000)
    if not to_published or not triggers:
        raise RuntimeError(f"run in {work}: no batch was triggered, timed and published")
    return first_published, to_published, triggers, progress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--transactions", type=int, default=60)
    parser.add_argument("--cap", type=int, default=10, help="maxChangesPerTrigger")
    args = parser.parse_args()
    spark = spark_ckpt.local_session("batch-latency")
    control = spark_ckpt.install(spark)
    with tempfile.TemporaryDirectory(prefix="batch-latency-") as scratch:
        log = Path(scratch, "log")
        records, _ = random_log(random.Random(7), args.transactions)
        write_log(str(log), records, [len(records) // 3, 2 * len(records) // 3])
        # One unmeasured run first: the session's first jobs pay the JVM's and workers' warm-up.
        run_once(spark, control, log, Path(scratch, "warm-up"), args.cap)
        latency, trigger, parts = [], [], {part: [] for part in PARTS}
        first, start_to_first = [], []
        batches = 0
        for index in range(args.runs):
            first_published, to_published, triggers, progress = run_once(
                spark, control, log, Path(scratch, f"run-{index}"), args.cap
            )
            first.append(to_published[0])
            start_to_first.append(first_published)
            latency.append(statistics.median(to_published))
            trigger.append(statistics.median(triggers))
            batches += len(to_published)
            for event in progress:
                if event.get("numInputRows"):
                    for part in PARTS:
                        parts[part].append(event["durationMs"].get(part, 0))
    spark.stop()
    print(
        json.dumps(
            {
                "bench": "batch_latency",
                "runs": args.runs,
                "batches": batches,
                "transactions": args.transactions,
                "max_changes_per_trigger": args.cap,
                "trigger_to_published_ms_median": round(statistics.median(latency) * 1000),
                "trigger_ms_median": round(statistics.median(trigger) * 1000),
                # A query's first batch: its trigger pays the source's planner process and the
                # first tasks; and from start() to that batch's published version.
                "first_batch_trigger_to_published_ms_median": round(
                    statistics.median(first) * 1000
                ),
                "start_to_first_published_ms_median": round(
                    statistics.median(start_to_first) * 1000
                ),
                "per_run_trigger_to_published_ms": [round(x * 1000) for x in latency],
                "progress_parts_ms_median": {
                    part: statistics.median(values) for part, values in parts.items() if values
                },
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
