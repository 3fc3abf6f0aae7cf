"""txn-cdc on Debezium files against Spark's own ``format("json")`` source, side by side.

Generates one Debezium-format log (interleaved transactions, spread over files), then runs in
alternating pairs, each ``Trigger.availableNow`` over the same files:

- into Spark's ``noop`` sink: ``txn-cdc`` (``debezium-json``, ``maxChangesPerTrigger``) against
  ``format("json")`` with a fixed schema (what a user who gives up transaction gating reads);
- into a Delta table: ``txn-cdc`` into ``delta-2pc`` against ``format("json")`` into delta-spark's
  own ``format("delta")`` sink.

Each system's time covers its whole run on the same files; a pair's ratio is Spark JSON's time
over txn-cdc's (above 1: txn-cdc is faster), and the verdict is the median of the per-pair
ratios. Prints one JSON line with ``ratio_over_spark_json_noop`` and
``ratio_over_spark_json_delta``. Run: ``scripts/bench.sh debezium_vs_spark_json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from spark_ckpt import install, local_session
from spark_ckpt.testing.debezium_log import random_log, write_log

# Every top-level key of a Debezium line; nested objects arrive as their JSON text.
SPARK_JSON_SCHEMA = (
    "status string, id string, event_count long, op string, before string, after string, "
    "source string, transaction string, ts_ms long"
)


def _timed(query: Any, control: Any, what: str) -> float:
    began = time.perf_counter()
    if not control.await_termination(query, 1800):
        query.stop()
        raise SystemExit(f"{what} did not finish within 30 minutes")
    return time.perf_counter() - began


def run_ours(spark: Any, control: Any, log: Path, out: Path, sink: str, cap: int) -> float:
    """txn-cdc into ``noop`` or ``delta-2pc``; seconds."""
    writer = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", str(cap))
        .load(str(log))
        .writeStream.option("checkpointLocation", str(out / "ckpt"))
        .trigger(availableNow=True)
    )
    if sink == "noop":
        query = writer.format("noop").start()
    else:
        query = writer.format("delta-2pc").option("path", str(out / "table")).start()
    return _timed(query, control, f"txn-cdc into {sink}")


def run_spark_json(spark: Any, control: Any, log: Path, out: Path, sink: str) -> float:
    """Spark's JSON file source into ``noop`` or delta-spark's sink; seconds."""
    writer = (
        spark.readStream.format("json")
        .schema(SPARK_JSON_SCHEMA)
        .load(str(log))
        .writeStream.option("checkpointLocation", str(out / "ckpt"))
        .trigger(availableNow=True)
    )
    if sink == "noop":
        query = writer.format("noop").start()
    else:
        query = writer.format("delta").start(str(out / "table"))
    return _timed(query, control, f"Spark JSON into {sink}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=40_000)
    parser.add_argument("--cap", type=int, default=50_000, help="maxChangesPerTrigger")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    records, expected = random_log(rng, args.transactions, max_size=20, interleave=6)
    changes = sum(len(t.events) for t in expected)
    spark = local_session("bench-debezium-vs-spark-json")
    control = install(spark)
    ratios: dict[str, list[float]] = {"noop": [], "delta": []}
    seconds: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log"
        write_log(str(log), records, sorted(rng.sample(range(len(records)), 20)))
        run_ours(spark, control, log, Path(tmp) / "warmup-ours", "noop", args.cap)
        run_spark_json(spark, control, log, Path(tmp) / "warmup-json", "noop")
        for pair in range(args.pairs):
            for sink in ("noop", "delta"):
                ours_first = (pair + (sink == "delta")) % 2 == 0
                timed: dict[str, float] = {}
                for system in ("ours", "json") if ours_first else ("json", "ours"):
                    out = Path(tmp) / f"{system}-{sink}-{pair}"
                    timed[system] = (
                        run_ours(spark, control, log, out, sink, args.cap)
                        if system == "ours"
                        else run_spark_json(spark, control, log, out, sink)
                    )
                    seconds.setdefault(f"{system}_{sink}", []).append(timed[system])
                ratios[sink].append(timed["json"] / timed["ours"])
    spark.stop()
    result = {
        "bench": "debezium_vs_spark_json",
        "changes": changes,
        "lines": len(records),
        "transactions": len(expected),
        "max_changes_per_trigger": args.cap,
        "pairs": args.pairs,
        "ratio_over_spark_json_noop": round(statistics.median(ratios["noop"]), 3),
        "ratio_over_spark_json_delta": round(statistics.median(ratios["delta"]), 3),
        "median_seconds": {k: round(statistics.median(v), 2) for k, v in sorted(seconds.items())},
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
