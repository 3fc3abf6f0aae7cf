"""Rows per second through delta-2pc and through delta-spark's streaming sink, side by side.

Generates one Debezium-format log, then alternately streams it (``txn-cdc`` source,
``Trigger.availableNow``) into a fresh Delta table with ``format("delta-2pc")`` and with
delta-spark's own ``format("delta")``. Each pair runs back to back; the verdict is the median of
the per-pair ratios. Publish latency is measured for every delta-2pc batch from the moment Spark
wrote ``commits/N`` (the file's modification time) to the moment the Delta version holding N
became visible: from the end of Spark's trigger for N (its progress event's ``timestamp`` plus
``batchDuration``; Spark writes ``commits/N`` inside the trigger, just before it ends) to the
``timestamp`` delta-rs wrote into that version's ``commitInfo``. Both are the driver's clock, in
milliseconds, on either store (object stores list modification times in whole seconds).

``--store s3`` puts both sinks' tables and checkpoints on an S3 server on loopback (moto's,
started here): delta-spark writes through Spark's s3a connector, delta-2pc through pyarrow and
delta-rs. The change log stays local, so both read the same input at the same cost.

Prints one JSON line. Run: ``.venv/bin/python bench/sink_throughput.py [--store s3]`` (see
docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

import spark_ckpt
from harness.servers.s3 import S3Server
from spark_ckpt.model.events import CompletedEvent
from spark_ckpt.state.history import fold
from spark_ckpt.state.storage import Location, StorageOptions
from spark_ckpt.testing.debezium_log import random_log, write_log


def run_once(
    spark: Any, control: spark_ckpt.Control, log: Path, work: str, sink: str, cap: int
) -> tuple[float, int, list[dict[str, Any]]]:
    """Stream the whole log into a new table under ``work`` with ``sink``.

    Returns (seconds, rows written, the query's progress events). ``work`` is a local directory
    or an ``s3a://`` prefix.
    """
    table, checkpoint = f"{work}/table", f"{work}/ckpt"
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
    rows = spark.read.format("delta").load(table).count()
    return elapsed, rows, list(query.recentProgress)


def publish_latencies(
    work: str, storage: StorageOptions, progress: list[dict[str, Any]]
) -> list[float]:
    """Seconds from the end of batch N's trigger to the Delta commit of N, for every batch."""
    records = fold(CompletedEvent.of_progress(p) for p in progress)
    ended = {r.checkpoint_id: r.ended_at for r in records if r.ended_at is not None}
    table = Location(f"{work}/table", storage)
    latencies = []
    for entry in DeltaTable(table.url, storage_options=table.delta_options()).history():
        batch = entry.get("spark-ckpt.batchId")
        if batch is None or int(batch) not in ended:
            continue
        latencies.append(int(entry["timestamp"]) / 1000 - ended[int(batch)])
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
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    args = parser.parse_args()
    server = S3Server().start() if args.store == "s3" else None
    try:
        run(args, server)
    finally:
        if server is not None:
            server.stop()


def run(args: argparse.Namespace, server: S3Server | None) -> None:
    """Run the warm-up and the pairs; print the JSON line."""
    rng = random.Random(args.seed)
    records, expected = random_log(rng, args.transactions, max_size=20, interleave=6)
    changes = sum(len(t.events) for t in expected)
    if server is None:
        spark = spark_ckpt.local_session("bench-sink-throughput")
    else:
        spark = spark_ckpt.local_session(
            "bench-sink-throughput", conf=server.spark_conf(), s3a=True
        )
    control = spark_ckpt.install(spark)
    storage = control.state.storage
    rates: dict[str, list[float]] = {"delta-2pc": [], "delta": []}
    ratios: list[float] = []
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log"
        write_log(str(log), records, sorted(rng.sample(range(len(records)), 20)))
        if server is None:
            root = tmp
        else:
            bucket = f"sink-{uuid.uuid4().hex[:8]}"
            server.create_bucket(bucket)
            root = f"s3a://{bucket}"
        for sink in ("delta-2pc", "delta"):  # warm-up, unmeasured
            run_once(spark, control, log, f"{root}/warm-{sink}", sink, args.cap)
        for pair in range(args.pairs):
            order = ["delta-2pc", "delta"] if pair % 2 == 0 else ["delta", "delta-2pc"]
            pair_rate = {}
            for sink in order:
                work = f"{root}/{sink}-{pair}"
                seconds, rows, progress = run_once(spark, control, log, work, sink, args.cap)
                if rows != changes:
                    raise SystemExit(f"{sink} wrote {rows} rows, expected {changes}")
                pair_rate[sink] = rows / seconds
                rates[sink].append(rows / seconds)
                if sink == "delta-2pc":
                    latencies += publish_latencies(work, storage, progress)
            ratios.append(pair_rate["delta-2pc"] / pair_rate["delta"])
    spark.stop()
    result = {
        "bench": "sink_throughput",
        "store": args.store,
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
