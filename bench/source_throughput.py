"""Changes per second through Spark with the transaction gate on and off, side by side.

Generates one Debezium-format log (interleaved transactions of varied sizes, spanning files),
then alternately runs the same ``Trigger.availableNow`` query over it with ``gate=on`` (batches end
only on transaction boundaries) and ``gate=off`` (batches end exactly at maxChangesPerTrigger,
splitting transactions). Each pair runs back to back; the verdict is the median of the per-pair
ratios, so drift on a noisy machine affects both sides of a pair alike.

Prints one JSON line. Run: ``.venv/bin/python bench/source_throughput.py`` (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from spark_ckpt import local_session
from spark_ckpt.testing.debezium_log import random_log, write_log


def run_once(spark, log: Path, checkpoint: Path, gate: str, cap: int) -> tuple[float, int]:
    """Run one availableNow query into the noop sink; return (seconds, rows)."""
    frame = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", str(cap))
        .option("gate", gate)
        .load(str(log))
    )
    began = time.perf_counter()
    query = (
        frame.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(1800):
        query.stop()
        raise SystemExit(f"gate={gate} run did not finish within 30 minutes")
    elapsed = time.perf_counter() - began
    if query.exception() is not None:
        raise SystemExit(f"gate={gate} run failed: {query.exception()}")
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    return elapsed, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=40_000)
    parser.add_argument("--max-size", type=int, default=20, help="largest transaction")
    parser.add_argument("--cap", type=int, default=50_000, help="maxChangesPerTrigger")
    parser.add_argument("--pairs", type=int, default=5, help="on/off pairs to run")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    records, expected = random_log(rng, args.transactions, max_size=args.max_size, interleave=6)
    changes = sum(len(t.events) for t in expected)
    spark = local_session("bench-source-throughput")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log"
        write_log(str(log), records, sorted(rng.sample(range(len(records)), 20)))
        # Warm up the JVM and Python workers once, unmeasured.
        run_once(spark, log, Path(tmp) / "warmup", "on", args.cap)
        rates: dict[str, list[float]] = {"on": [], "off": []}
        ratios = []
        for pair in range(args.pairs):
            order = ["on", "off"] if pair % 2 == 0 else ["off", "on"]
            pair_rate = {}
            for gate in order:
                checkpoint = Path(tmp) / f"ckpt-{gate}-{pair}"
                seconds, rows = run_once(spark, log, checkpoint, gate, args.cap)
                if rows != changes:
                    raise SystemExit(f"gate={gate} delivered {rows} rows, expected {changes}")
                pair_rate[gate] = rows / seconds
                rates[gate].append(rows / seconds)
            ratios.append(pair_rate["on"] / pair_rate["off"])
    spark.stop()
    result = {
        "bench": "source_throughput",
        "changes": changes,
        "transactions": len(expected),
        "max_changes_per_trigger": args.cap,
        "pairs": args.pairs,
        "gate_on_changes_per_s": round(statistics.median(rates["on"])),
        "gate_off_changes_per_s": round(statistics.median(rates["off"])),
        "ratio_on_over_off": round(statistics.median(ratios), 4),
        "gate_cost_pct": round((1 - statistics.median(ratios)) * 100, 2),
        "target_cost_pct": 3.0,
    }
    print(json.dumps(result), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
