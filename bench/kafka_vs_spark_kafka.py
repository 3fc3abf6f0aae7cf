"""txn-cdc on Debezium's Kafka topics against Spark's own Kafka source, side by side.

The topics are written by Debezium itself: Kafka Connect (standalone,
:mod:`harness.servers.kafka_connect`) runs Debezium's PostgreSQL connector on a throwaway
PostgreSQL server while :mod:`harness.workloads.postgres`' transactions run in two sessions, into
a KRaft broker (:mod:`harness.servers.kafka`) on loopback.
Every table's topic has three partitions, the transaction topic one; Kafka Connect's JSON
converter writes its schema envelope (its default). Then it runs in alternating pairs, each
``Trigger.availableNow`` over the same topics from the earliest offsets:

- into Spark's ``noop`` sink: ``txn-cdc`` (``connector=kafka``) against Spark's ``kafka`` source
  (``spark-sql-kafka-0-10``) with ``from_json`` on the value, the envelope's payload fields
  as columns (what a user who gives up transaction gating reads);
- into a Delta table: ``txn-cdc`` into ``delta-2pc`` against Spark's source into delta-spark's
  own ``format("delta")`` sink.

Each system's time covers its whole run, from the query's start to its end; a pair's ratio is
Spark's time over txn-cdc's (above 1: txn-cdc is faster), and the verdict is the median of the
per-pair ratios. Both sides run with their defaults (no per-trigger cap: one batch each).

Each pair also runs the *pass-through* (``passthrough.py``): txn-cdc's own output rows replayed by
a Python source that decodes nothing, into the same sink. ``ceiling_noop`` and ``ceiling_delta``
are Spark's time over the pass-through's: the ratio a reader costing nothing would get, since
Spark's Python data source path is what it is. ``ours_planning_s`` is the time the source's
planning (``latestOffset``: reading every partition on the driver) took inside ours.

Prints one JSON line with ``ratio_over_spark_kafka_noop`` and ``ratio_over_spark_kafka_delta``.
Run: ``scripts/bench.sh kafka_vs_spark_kafka``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from passthrough import Timed, busy_cpu_seconds, passthrough_run

from spark_ckpt import install, local_session

PREFIX = "bench"
PARTITIONS = 3
# Kafka Connect's JSON envelope; the payload's nested objects arrive as their JSON text.
ENVELOPE = (
    "payload struct<status: string, id: string, event_count: long, op: string, "
    "before: string, after: string, source: string, transaction: string, ts_ms: long>"
)


def write_topics(bootstrap: str, transactions: int, seed: int, workdir: Path) -> dict[str, int]:
    """Let Debezium write ``transactions`` workload transactions into the broker's topics.

    Returns the counts of what was written: ``records``, ``changes``, ``transactions``.
    """
    from harness.servers.kafka_connect import KafkaConnect, debezium_postgres
    from harness.servers.postgres import PgCluster
    from harness.workloads import postgres as pg_workload

    server = PgCluster(tempfile.mkdtemp(prefix="bench-kafka-pg-")).start()
    connect = KafkaConnect(workdir / "connect", bootstrap)
    try:
        dsn = server.dsn()
        pg_workload.create_schema(dsn, accounts=200, seed=seed)
        _create_topic(bootstrap, f"{PREFIX}.transaction", 1)  # its order needs one partition
        connect.start()
        config = debezium_postgres(
            dsn,
            prefix=PREFIX,
            slot="bench_slot",
            tables=",".join(pg_workload.TABLES),
            partitions=PARTITIONS,
            extra={"max.batch.size": "8192", "max.queue.size": "32768"},
        )
        connect.add_connector("bench", config)
        connect.wait_running("bench")
        # Two sessions, as an application's connection pool would commit them.
        work = [
            pg_workload.Workload(dsn, transactions=transactions // 2, seed=seed + i + 1)
            for i in range(2)
        ]
        for w in work:
            w.start()
        for w in work:
            w.join(3600)
        _wait_settled(bootstrap, 5.0, 900)
    finally:
        connect.stop()
        server.stop()
    return _count(bootstrap)


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)


def _ends(bootstrap: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-ends"})
    try:
        metadata = consumer.list_topics(timeout=30)
        ends: dict[tuple[str, int], int] = {}
        for topic, meta in metadata.topics.items():
            if topic.startswith(PREFIX + "."):
                for partition in meta.partitions:
                    _, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=30
                    )
                    ends[(topic, partition)] = high
        return ends
    finally:
        consumer.close()


def _wait_settled(bootstrap: str, quiet: float, timeout: float) -> None:
    """Until no partition grew for ``quiet`` seconds (Debezium caught up with the workload)."""
    deadline = time.monotonic() + timeout
    last, since = _ends(bootstrap), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise SystemExit(f"Debezium's topics still grew after {timeout:.0f}s")
        time.sleep(0.5)
        now = _ends(bootstrap)
        if now != last:
            last, since = now, time.monotonic()


def _count(bootstrap: str) -> dict[str, int]:
    """Records, change events and transaction ENDs in the topics."""
    from confluent_kafka import Consumer, TopicPartition

    ends = _ends(bootstrap)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-count", "enable.auto.commit": False}
    )
    counts = {"records": 0, "changes": 0, "transactions": 0}
    try:
        consumer.assign([TopicPartition(t, p, 0) for (t, p), end in ends.items() if end])
        left = {tp: end for tp, end in ends.items() if end}
        deadline = time.monotonic() + 600
        while left and time.monotonic() < deadline:
            for message in consumer.consume(10_000, timeout=1.0):
                if message.error() is not None:
                    continue
                tp = (message.topic(), message.partition())
                counts["records"] += 1
                if message.offset() + 1 >= left.get(tp, 0):
                    left.pop(tp, None)
                value = message.value()
                if value is None:
                    continue
                payload = json.loads(value).get("payload") or {}
                if payload.get("op") in ("c", "u", "d", "r"):
                    counts["changes"] += 1
                elif payload.get("status") == "END":
                    counts["transactions"] += 1
        if left:
            raise SystemExit(f"could not count every record: {len(left)} partitions not read")
    finally:
        consumer.close()
    return counts


def run_ours(spark: Any, control: Any, bootstrap: str, out: Path, sink: str) -> Timed:
    """txn-cdc (``connector=kafka``) into ``noop`` or ``delta-2pc``."""
    cpu, began = busy_cpu_seconds(), time.perf_counter()
    writer = (
        spark.readStream.format("txn-cdc")
        .option("connector", "kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", f"{PREFIX}[.].*")
        .load()
        .writeStream.option("checkpointLocation", str(out / "ckpt"))
        .trigger(availableNow=True)
    )
    if sink == "noop":
        query = writer.format("noop").start()
    else:
        query = writer.format("delta-2pc").option("path", str(out / "table")).start()
    return Timed(control, query, began, cpu)


def run_spark_kafka(spark: Any, control: Any, bootstrap: str, out: Path, sink: str) -> Timed:
    """Spark's Kafka source, each value parsed with ``from_json``, into ``noop`` or Delta."""
    from pyspark.sql import functions as sf

    cpu, began = busy_cpu_seconds(), time.perf_counter()
    frame = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", f"{PREFIX}[.].*")
        .option("startingOffsets", "earliest")
        .load()
        .select(
            sf.from_json(sf.col("value").cast("string"), ENVELOPE).alias("v"),
            "topic",
            "partition",
            "offset",
        )
        .select("v.payload.*", "topic", "partition", "offset")
    )
    writer = frame.writeStream.option("checkpointLocation", str(out / "ckpt")).trigger(
        availableNow=True
    )
    if sink == "noop":
        query = writer.format("noop").start()
    else:
        query = writer.format("delta").start(str(out / "table"))
    return Timed(control, query, began, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=40_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    from harness.servers.kafka import KafkaBroker, spark_kafka_package

    ratios: dict[str, list[float]] = {"noop": [], "delta": []}
    ceilings: dict[str, list[float]] = {"noop": [], "delta": []}
    seconds: dict[str, list[float]] = {}
    planning: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        broker = KafkaBroker(Path(tmp) / "broker", heap="1g")
        broker.start()
        try:
            counts = write_topics(broker.bootstrap, args.transactions, args.seed, Path(tmp))
            spark = local_session("bench-kafka-vs-spark-kafka", packages=[spark_kafka_package()])
            control = install(spark)
            # Warm-up, and the rows the pass-through replays: ours into delta-2pc, once.
            rows = run_ours(spark, control, broker.bootstrap, Path(tmp) / "rows", "delta")
            run_spark_kafka(spark, control, broker.bootstrap, Path(tmp) / "warmup", "noop")
            for pair in range(args.pairs):
                for sink in ("noop", "delta"):
                    ours_first = (pair + (sink == "delta")) % 2 == 0
                    timed: dict[str, Timed] = {}
                    for system in ("ours", "spark") if ours_first else ("spark", "ours"):
                        out = Path(tmp) / f"{system}-{sink}-{pair}"
                        run = run_ours if system == "ours" else run_spark_kafka
                        timed[system] = run(spark, control, broker.bootstrap, out, sink)
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
                    expected = (counts["changes"], counts["changes"], counts["records"])
                    found = (timed["ours"].rows, timed["passthrough"].rows, timed["spark"].rows)
                    if found != expected:
                        raise SystemExit(f"row counts {found} differ from {expected}: {timed}")
                    for system, run_timed in timed.items():
                        seconds.setdefault(f"{system}_{sink}", []).append(run_timed.wall)
                    ratios[sink].append(timed["spark"].wall / timed["ours"].wall)
                    ceilings[sink].append(timed["spark"].wall / timed["passthrough"].wall)
                    planning.append(timed["ours"].planning)
            spark.stop()
        finally:
            broker.stop()
    result = {
        "bench": "kafka_vs_spark_kafka",
        "topics": "real",
        "records": counts["records"],
        "changes": counts["changes"],
        "transactions": counts["transactions"],
        "partitions_per_table": PARTITIONS,
        "pairs": args.pairs,
        "ratio_over_spark_kafka_noop": round(statistics.median(ratios["noop"]), 3),
        "ratio_over_spark_kafka_delta": round(statistics.median(ratios["delta"]), 3),
        "ceiling_noop": round(statistics.median(ceilings["noop"]), 3),
        "ceiling_delta": round(statistics.median(ceilings["delta"]), 3),
        "ours_planning_s": round(statistics.median(planning), 2),
        "median_seconds": {k: round(statistics.median(v), 2) for k, v in sorted(seconds.items())},
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
