"""Debezium via Kafka Connect into a real broker, read by txn-cdc into Delta mirrors, with kills.

Kafka Connect (standalone) runs Debezium's PostgreSQL connector on the test database; every
table's topic has three partitions. The query runs in a driver process of its own
(``harness.faults.debezium``, ``connector=kafka`` into ``delta-2pc`` ``mode=mirror``): killed
once after batch 3's manifest and once before batch 6's publish, while a workload of multi-table
transactions (deletes and key changes among them) runs and a transaction of 20,000 rows spread
over every partition commits; Debezium's worker is SIGKILLed once (it sends again what followed
its last flushed offsets) and the broker is restarted once while a driver reads. At the end every
transaction is in exactly one Delta version of the change log, whole, in commit order; the change
log folded by key equals PostgreSQL row for row, and the mirrors equal the tables.

In the same test, Spark's own Kafka source reads the same topics into delta-spark's sink, a few
dozen offsets per batch: a transaction's changes land in different versions, which is what
this connector exists to prevent.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from changelog_checks import whole_once
from conftest import wait_until
from debezium_postgres import KEYS, PostgresCapture, canonical

from harness.faults.debezium import DebeziumDriver, delta_changes, delta_mirrors, delta_txn_ids
from harness.servers.kafka import KafkaBroker
from harness.servers.kafka_connect import KafkaConnect, debezium_postgres
from harness.servers.postgres import PgCluster
from harness.workloads import postgres as pg_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.soak]

ACCOUNTS = 30
LARGE_ROWS = 20_000
PARTITIONS = 3


def assert_mirrors_equal_tables(root: Path, dsn: str) -> None:
    """Each mirror, as of the newest checkpoint (delta-rs), equals its table row for row."""
    import psycopg

    mirrors = delta_mirrors(root)
    with psycopg.connect(dsn) as conn:
        for name in KEYS:
            cursor = conn.execute(f"SELECT * FROM {name}")
            columns = [d.name for d in cursor.description or ()]
            source = sorted(
                tuple((c, canonical(c, v)) for c, v in zip(columns, row, strict=True))
                for row in cursor.fetchall()
            )
            mirrored = sorted(
                tuple((c, canonical(c, row[c])) for c in columns)
                for row in mirrors[name].to_pylist()
            )
            assert mirrored == source, f"the mirror of {name} differs from the table"


def spread(broker: KafkaBroker, topic: str) -> int:
    """The fewest records any partition of ``topic`` holds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "spread"})
    try:
        ends = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()
    return min(ends)


def spark_kafka_versions(
    spark: SparkSession, bootstrap: str, prefix: str, tmp_path: Path
) -> dict[str, set[int]]:
    """Spark's Kafka source on two tables' topics, 40 offsets a batch, into delta-spark's sink.

    Returns each transaction id with the Delta versions its changes landed in. The order items'
    topic (the large transaction's 20,000 rows) is left out: it would only take longer.
    """
    table = tmp_path / "spark-kafka"
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", f"{prefix}[.]public[.](accounts|orders)")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "40")
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "spark-kafka-ckpt"))
        .trigger(availableNow=True)
        .start(str(table))
    )
    assert query.awaitTermination(300), "Spark's Kafka source did not finish"
    versions: dict[str, set[int]] = defaultdict(set)
    for row in delta_changes(table):
        if row["value"] is None:
            continue  # a tombstone
        payload = json.loads(row["value"])["payload"]
        if payload.get("transaction"):
            versions[payload["transaction"]["id"].split(":")[0]].add(row["version"])
    return versions


def test_debeziums_topics_land_whole_through_kills_of_the_driver_connect_and_the_broker(
    spark: SparkSession,
    kafka_broker: KafkaBroker,
    kafka_connect: KafkaConnect,
    pg_server: PgCluster,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    capture = PostgresCapture(pg_server, pg_dsn, ACCOUNTS)
    capture.create_schema()
    prefix = f"e{uuid.uuid4().hex[:6]}"
    kafka_broker.create_topic(f"{prefix}.transaction", partitions=1)  # commit order: one
    name = f"{prefix}-connector"
    kafka_connect.add_connector(
        name,
        debezium_postgres(
            pg_dsn,
            prefix=prefix,
            slot=f"slot_{prefix}",
            tables=",".join(pg_workload.TABLES),
            partitions=PARTITIONS,
        ),
    )
    kafka_connect.wait_running(name)
    root = tmp_path / "lake"
    changes = root / "_changes"
    source = {
        "connector": "kafka",
        "kafka.bootstrap.servers": kafka_broker.bootstrap,
        "subscribePattern": f"{prefix}[.].*",
        "columnTypes": "true",
    }
    driver = DebeziumDriver(
        tmp_path / "unused",
        root,
        tmp_path / "ckpt",
        tmp_path / "driver",
        source=source,
        sink={"mode": "mirror"},
    )
    committed: list[str] = []
    try:
        driver.start(fault="after_manifest:3", max_changes=100)
        wait_until(
            lambda: "snapshot" in delta_txn_ids(changes),
            120,
            f"the first driver did not publish the snapshot; stderr {driver.stderr_file}",
        )
        join_first = capture.start_workload("first", 60, seed=1)
        driver.wait_killed(180)
        published_at_first_kill = len(delta_txn_ids(changes))
        # Written while no driver runs: 20,000 rows over every partition and a key change.
        committed.append(capture.large_transaction(LARGE_ROWS))
        wait_until(
            lambda: spread(kafka_broker, f"{prefix}.public.order_items") >= LARGE_ROWS // 4,
            120,
            "Debezium did not write the large transaction over every partition",
        )
        # Debezium's worker killed: what followed its last flushed offsets comes again.
        kafka_connect.kill()
        kafka_connect.restart()
        kafka_connect.wait_running(name)
        driver.start(fault="before_publish:6", max_changes=100)
        join_second = capture.start_workload("second", 40, seed=2)
        committed += join_first(180)
        # The broker restarted while the driver reads: the client reconnects within its bound.
        kafka_broker.stop()
        kafka_broker.restart()
        driver.wait_killed(240)
        driver.start(max_changes=1000)
        committed += join_second(180)
        expected = {*committed, "snapshot"}
        wait_until(
            lambda: delta_txn_ids(changes) >= expected,
            240,
            f"the drivers did not bring all {len(committed)} transactions to Delta; "
            f"stderr {driver.stderr_file}",
        )
        driver.stop(180)
        spark_versions = spark_kafka_versions(spark, kafka_broker.bootstrap, prefix, tmp_path)
    finally:
        driver.kill()
        kafka_connect.delete_connector(name)

    rows = delta_changes(changes)
    by_txn = whole_once(rows)  # each unit whole, in one version
    assert published_at_first_kill < len(by_txn), "the first driver published everything"
    snapshot = by_txn.pop("snapshot")
    assert {r["op"] for r in snapshot} == {"r"}
    assert sum(1 for r in snapshot if r["table"] == "public.accounts") == ACCOUNTS
    assert sorted(by_txn) == sorted(committed), "a transaction is missing, repeated or extra"
    assert max(len(v) for v in by_txn.values()) >= LARGE_ROWS, "the large transaction in part"
    # Commit order: a later unit never lands in an earlier version.
    ordered = sorted(rows, key=lambda r: (r["txn_order"], r["event_index"]))
    versions = [r["version"] for r in ordered]
    assert versions == sorted(versions), "a unit landed before one committed earlier"
    capture.assert_folds_to_tables(rows)
    assert_mirrors_equal_tables(root, pg_dsn)
    # Spark's own Kafka source split at least one of the same transactions across versions.
    split = {t for t, v in spark_versions.items() if len(v) > 1}
    assert split & set(committed), "Spark's Kafka source delivered every transaction whole"
