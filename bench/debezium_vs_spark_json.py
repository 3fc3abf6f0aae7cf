"""txn-cdc on Debezium files against Spark's own ``format("json")`` source, side by side.

The log is written by Debezium itself (``--log real``, the default): Debezium 3.6's embedded
engine (``tests/harness/peers/debezium-writer``) captures a throwaway PostgreSQL server while
:mod:`harness.workloads.postgres`' transactions run, writing record values without Kafka
Connect's schema envelope (what ``format("json")`` with a fixed schema can read) and decimals as
strings.
``--log generated`` uses the project's generator instead (interleaved transactions, spread over
files). Then it runs in alternating pairs, each ``Trigger.availableNow`` over the same files:

- into Spark's ``noop`` sink: ``txn-cdc`` (``debezium-json``, ``maxChangesPerTrigger``) against
  ``format("json")`` with a fixed schema (what a user who gives up transaction gating reads);
- into a Delta table: ``txn-cdc`` into ``delta-2pc`` against ``format("json")`` into delta-spark's
  own ``format("delta")`` sink.

Each system's time covers its whole run on the same files, from the query's start to its end; a
pair's ratio is Spark JSON's time over txn-cdc's (above 1: txn-cdc is faster), and the verdict is
the median of the per-pair ratios. Both sides run with their defaults (no per-trigger cap: one
batch each); ``--cap`` sets txn-cdc's ``maxChangesPerTrigger``.

Each pair also runs the *pass-through* (``passthrough.py``): txn-cdc's own output rows replayed by
a Python source that decodes nothing, into the same sink. ``ceiling_noop`` and ``ceiling_delta``
are Spark JSON's time over the pass-through's: the ratio a decoder costing nothing would get,
since Spark's Python data source path is what it is. ``ours_planning_s`` is the time the source's
planning (``latestOffset``, in the driver) took inside ours.

Prints one JSON line with ``ratio_over_spark_json_noop`` and ``ratio_over_spark_json_delta``.
Run: ``scripts/bench.sh debezium_vs_spark_json``.
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

from passthrough import Timed, busy_cpu_seconds, passthrough_run

from spark_ckpt import install, local_session
from spark_ckpt.testing.debezium_log import random_log, write_log

# Every top-level key of a Debezium line; nested objects arrive as their JSON text.
SPARK_JSON_SCHEMA = (
    "status string, id string, event_count long, op string, before string, after string, "
    "source string, transaction string, ts_ms long"
)


def run_ours(
    spark: Any, control: Any, log: Path, out: Path, sink: str, cap: int, per_partition: int = 0
) -> Timed:
    """txn-cdc into ``noop`` or ``delta-2pc`` (``cap``, ``per_partition``: 0 for the default)."""
    cpu, began = busy_cpu_seconds(), time.perf_counter()
    reader = spark.readStream.format("txn-cdc").option("connector", "debezium-json")
    if cap:
        reader = reader.option("maxChangesPerTrigger", str(cap))
    if per_partition:
        reader = reader.option("changesPerPartition", str(per_partition))
    writer = (
        reader.load(str(log))
        .writeStream.option("checkpointLocation", str(out / "ckpt"))
        .trigger(availableNow=True)
    )
    if sink == "noop":
        query = writer.format("noop").start()
    else:
        query = writer.format("delta-2pc").option("path", str(out / "table")).start()
    return Timed(control, query, began, cpu)


def run_spark_json(spark: Any, control: Any, log: Path, out: Path, sink: str) -> Timed:
    """Spark's JSON file source into ``noop`` or delta-spark's sink."""
    cpu, began = busy_cpu_seconds(), time.perf_counter()
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
    return Timed(control, query, began, cpu)


def real_log(directory: Path, transactions: int, seed: int) -> tuple[int, int, int]:
    """Let Debezium write ``transactions`` workload transactions (PostgreSQL) into ``directory``.

    Returns ``(changes, lines, transactions)`` of the log as written.
    """
    from harness.servers.postgres import PASSWORD, USER, PgCluster
    from harness.workloads import postgres as pg_workload
    from harness.workloads.debezium import DebeziumWriter

    server = PgCluster(tempfile.mkdtemp(prefix="bench-dbz-pg-")).start()
    try:
        dsn = server.dsn()
        pg_workload.create_schema(dsn, accounts=200, seed=seed)
        writer = DebeziumWriter(
            "postgres",
            directory,
            Path(server.workdir) / "writer",
            host="127.0.0.1",
            port=server.port,
            user=USER,
            password=PASSWORD,
            database="postgres",
            tables=",".join(pg_workload.TABLES),
            schemas=False,
            roll_records=20_000,
            roll_ms=2_000,
            props={
                "decimal.handling.mode": "string",
                "max.batch.size": "8192",
                "max.queue.size": "32768",
            },
        ).start()
        try:
            # Two sessions, as an application's connection pool would commit them.
            work = [
                pg_workload.Workload(dsn, transactions=transactions // 2, seed=seed + i + 1)
                for i in range(2)
            ]
            for w in work:
                w.start()
            for w in work:
                w.join(3600)
            writer.wait_idle(5.0, 600)
        finally:
            writer.stop()
    finally:
        server.stop()
    changes = lines = ends = 0
    for path in sorted(directory.glob("*.jsonl")):
        # Lines end at "\n" only: JSON strings may hold U+2028, which splitlines() splits at.
        for line in path.read_bytes().split(b"\n"):
            if not line:
                continue
            lines += 1
            value = json.loads(line)
            if isinstance(value, dict) and value.get("op") in ("c", "u", "d", "r"):
                changes += 1
            elif isinstance(value, dict) and value.get("status") == "END":
                ends += 1
    return changes, lines, ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--log", choices=("real", "generated"), default="real", help="who writes the log"
    )
    parser.add_argument("--transactions", type=int, default=40_000)
    parser.add_argument(
        "--cap", type=int, default=0, help="maxChangesPerTrigger (0: unset, the default)"
    )
    parser.add_argument(
        "--changes-per-partition", type=int, default=0, help="txn-cdc's (0: its default)"
    )
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    spark = local_session("bench-debezium-vs-spark-json")
    control = install(spark)
    ratios: dict[str, list[float]] = {"noop": [], "delta": []}
    ceilings: dict[str, list[float]] = {"noop": [], "delta": []}
    seconds: dict[str, list[float]] = {}
    planning: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log"
        if args.log == "real":
            changes, lines, transactions = real_log(log, args.transactions, args.seed)
        else:
            records, expected = random_log(rng, args.transactions, max_size=20, interleave=6)
            write_log(str(log), records, sorted(rng.sample(range(len(records)), 20)))
            changes = sum(len(t.events) for t in expected)
            lines, transactions = len(records), len(expected)
        # Warm-up, and the rows the pass-through replays: ours into delta-2pc, once.
        rows = run_ours(
            spark, control, log, Path(tmp) / "rows", "delta", args.cap, args.changes_per_partition
        )
        run_spark_json(spark, control, log, Path(tmp) / "warmup-json", "noop")
        for pair in range(args.pairs):
            for sink in ("noop", "delta"):
                ours_first = (pair + (sink == "delta")) % 2 == 0
                timed: dict[str, Timed] = {}
                for system in ("ours", "json") if ours_first else ("json", "ours"):
                    out = Path(tmp) / f"{system}-{sink}-{pair}"
                    per_partition = args.changes_per_partition
                    timed[system] = (
                        run_ours(spark, control, log, out, sink, args.cap, per_partition)
                        if system == "ours"
                        else run_spark_json(spark, control, log, out, sink)
                    )
                out = Path(tmp) / f"passthrough-{sink}-{pair}"
                out.mkdir()
                timed["passthrough"] = passthrough_run(
                    spark,
                    control,
                    Path(tmp) / "rows" / "table",
                    out,
                    rows.batches,
                    "noop" if sink == "noop" else "delta-2pc",
                )
                if not timed["ours"].rows == timed["passthrough"].rows == changes:
                    raise SystemExit(f"row counts differ from the {changes} changes: {timed}")
                for system, run in timed.items():
                    seconds.setdefault(f"{system}_{sink}", []).append(run.wall)
                ratios[sink].append(timed["json"].wall / timed["ours"].wall)
                ceilings[sink].append(timed["json"].wall / timed["passthrough"].wall)
                planning.append(timed["ours"].planning)
    spark.stop()
    result = {
        "bench": "debezium_vs_spark_json",
        "log": args.log,
        "changes": changes,
        "lines": lines,
        "transactions": transactions,
        "max_changes_per_trigger": args.cap or None,
        "changes_per_partition": args.changes_per_partition or None,
        "pairs": args.pairs,
        "ratio_over_spark_json_noop": round(statistics.median(ratios["noop"]), 3),
        "ratio_over_spark_json_delta": round(statistics.median(ratios["delta"]), 3),
        "ceiling_noop": round(statistics.median(ceilings["noop"]), 3),
        "ceiling_delta": round(statistics.median(ceilings["delta"]), 3),
        "ours_planning_s": round(statistics.median(planning), 2),
        "median_seconds": {k: round(statistics.median(v), 2) for k, v in sorted(seconds.items())},
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
