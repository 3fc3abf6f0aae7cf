"""Rows per second through delta-2pc and through delta-spark's streaming sink, side by side.

Generates one Debezium-format log, then alternately streams it (``txn-cdc`` source,
``Trigger.availableNow``) into a fresh Delta table with ``format("delta-2pc")`` and with
delta-spark's own ``format("delta")``. Each pair runs back to back; the verdict is the median of
the per-pair ratios. Publish latency is measured for every delta-2pc batch from the moment Spark
wrote ``commits/N`` (the file's mtime) to the moment the Delta version holding N became visible
(its ``_delta_log`` file's mtime).

Prints one JSON line. Run: ``.venv/bin/python bench/sink_throughput.py`` (see README).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

import spark_ckpt
from spark_ckpt.testing.debezium_log import random_log, write_log


def run_once(
    spark: Any, control: spark_ckpt.Control, log: Path, work: Path, sink: str, cap: int
) -> tuple[float, int]:
    """Stream the whole log into a new table with ``sink``; return (seconds, rows written)."""
    table, checkpoint = work / "table", work / "ckpt"
    frame = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", str(cap))
        .load(str(log))
    )
    began = time.perf_counter()
    query = (
        frame.writeStream.format(sink)
        .option("path", str(table))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    if not control.await_termination(query, 1800):
        query.stop()
        raise SystemExit(f"the {sink} run did not finish within 30 minutes")
    elapsed = time.perf_counter() - began
    rows = spark.read.format("delta").load(str(table)).count()
    return elapsed, rows


def publish_latencies(work: Path) -> list[float]:
    """Seconds from commits/N to the Delta version of N, for every batch of a delta-2pc run."""
    table, checkpoint = work / "table", work / "ckpt"
    latencies = []
    for entry in DeltaTable(str(table)).history():
        batch = entry.get("spark-ckpt.batchId")
        if batch is None:
            continue
        version = entry["version"]
        visible = os.path.getmtime(table / "_delta_log" / f"{version:020d}.json")
        committed = os.path.getmtime(checkpoint / "commits" / str(batch))
        latencies.append(visible - committed)
    return latencies


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=30_000)
    parser.add_argument("--cap", type=int, default=30_000, help="maxChangesPerTrigger")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    records, expected = random_log(rng, args.transactions, max_size=20, interleave=6)
    changes = sum(len(t.events) for t in expected)
    spark = spark_ckpt.local_session("bench-sink-throughput")
    control = spark_ckpt.install(spark)
    rates: dict[str, list[float]] = {"delta-2pc": [], "delta": []}
    ratios: list[float] = []
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log"
        write_log(str(log), records, sorted(rng.sample(range(len(records)), 20)))
        for sink in ("delta-2pc", "delta"):  # warm-up, unmeasured
            run_once(spark, control, log, Path(tmp) / f"warm-{sink}", sink, args.cap)
        for pair in range(args.pairs):
            order = ["delta-2pc", "delta"] if pair % 2 == 0 else ["delta", "delta-2pc"]
            pair_rate = {}
            for sink in order:
                work = Path(tmp) / f"{sink}-{pair}"
                seconds, rows = run_once(spark, control, log, work, sink, args.cap)
                if rows != changes:
                    raise SystemExit(f"{sink} wrote {rows} rows, expected {changes}")
                pair_rate[sink] = rows / seconds
                rates[sink].append(rows / seconds)
                if sink == "delta-2pc":
                    latencies += publish_latencies(work)
            ratios.append(pair_rate["delta-2pc"] / pair_rate["delta"])
    spark.stop()
    result = {
        "bench": "sink_throughput",
        "rows": changes,
        "max_changes_per_trigger": args.cap,
        "pairs": args.pairs,
        "delta_2pc_rows_per_s": round(statistics.median(rates["delta-2pc"])),
        "delta_rows_per_s": round(statistics.median(rates["delta"])),
        "ratio_2pc_over_delta": round(statistics.median(ratios), 4),
        "publish_latency_ms_p50": round(percentile(latencies, 0.5) * 1000, 1),
        "publish_latency_ms_p99": round(percentile(latencies, 0.99) * 1000, 1),
        "published_batches_measured": len(latencies),
        "targets": {"ratio": ">= 1.0", "p50_ms": "<= 200", "p99_ms": "<= 1000"},
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
