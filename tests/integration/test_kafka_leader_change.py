"""The kafka connector through partition leader changes, on a cluster of two brokers.

A leader change is what an operator's rolling restart does to every partition a broker leads: a
controlled shutdown hands the leadership to an in-sync follower, and a preferred-leader election
hands it back once the broker is in sync again. The cluster (:class:`KafkaCluster`: node 1 broker
and controller, node 2 a broker; topics of two replicas, ``min.insync.replicas=1``) is started
for this module only: the other Kafka tests share the single broker of ``kafka_broker``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from changelog_checks import whole_once
from conftest import wait_until, workers_stderr
from kafka_drive import TransactionWriter

import spark_ckpt
from harness.faults.debezium import delta_changes, delta_txn_ids
from harness.servers.kafka import KafkaCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# In the soak tier: it starts a cluster of its own (two broker JVMs, about 45 s) and in its runs no
# leader change reached the connector as an error (librdkafka followed the new leaders itself);
# the connector's retry of a partition without a leader is what the command's broker kill meets.
pytestmark = [pytest.mark.integration, pytest.mark.soak]

# The connector's warnings while it waits on the brokers (client.retrying, the planner's and the
# executors' reads): each names what it met and the bound it waits for.
_WAITING = re.compile(r"^.*kafkaConsumer\.pollTimeoutMs.*$", re.MULTILINE)


@pytest.fixture(scope="module")
def kafka_cluster() -> Iterator[KafkaCluster]:
    """Two Kafka brokers on loopback (harness.servers.kafka), stopped after the module."""
    cluster = KafkaCluster(tempfile.mkdtemp(prefix="spark-ckpt-kafka-cluster-"))
    cluster.start()
    yield cluster
    cluster.stop()
    shutil.rmtree(cluster.workdir, ignore_errors=True)


def test_an_unsupervised_query_survives_its_partitions_leaders_moving_away_and_back(
    spark: SparkSession,
    control: spark_ckpt.Control,
    kafka_cluster: KafkaCluster,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Every transaction lands once and whole while node 2's partitions change leader twice.

    Debezium's topics (orders in 3 partitions, the transaction topic), each partition led by
    node 2 with node 1 its follower. Transactions are written all along; node 2 stops (a
    controlled shutdown: node 1 leads every partition), the query goes on delivering, node 2
    starts again and a preferred-leader election gives it its partitions back. The query runs
    unsupervised with the default ``kafkaConsumer.pollTimeoutMs``; whatever it waited for, its
    warnings name.
    """
    prefix = f"l{uuid.uuid4().hex[:8]}"
    partitions = 3
    topics = [f"{prefix}.public.orders", f"{prefix}.transaction"]
    kafka_cluster.create_topic(topics[0], partitions, leader=2)
    kafka_cluster.create_topic(topics[1], 1, leader=2)
    writer = TransactionWriter(kafka_cluster.bootstrap, prefix, partitions)
    table = tmp_path / "table"
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "kafka")
        .option("kafka.bootstrap.servers", kafka_cluster.bootstrap)
        .option("subscribePattern", f"{prefix}[.].*")
        .option("snapshotSettle", "1ms")
        .load()
        .writeStream.format("delta-2pc")
        .option("path", str(table))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )

    def led_by(node: int, why: str) -> None:
        wait_until(lambda: set(kafka_cluster.leaders(topics).values()) == {node}, 30, why)

    def delivered(at_least: int) -> bool:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        return len(delta_txn_ids(table)) >= at_least

    writer.start()
    try:
        led_by(2, "node 2 leading every partition at first")
        # The first batch starts the query's Python workers: tens of seconds on busy cores.
        wait_until(lambda: delivered(3), 120, "the query delivering")
        kafka_cluster.node(2).stop()
        led_by(1, "node 1 leading every partition after node 2's controlled shutdown")
        moved = len(delta_txn_ids(table))
        kafka_cluster.node(2).restart()  # seconds, while node 1 leads alone
        wait_until(lambda: delivered(moved + 2), 60, "delivering while node 1 led")
        kafka_cluster.elect_preferred(topics)
        led_by(2, "node 2 leading every partition after the preferred-leader election")
        # Written while node 2 leads again; the catch-up below needs them read from it.
        written = len(writer.produced)
        wait_until(lambda: len(writer.produced) >= written + 5, 30, "writing to node 2 again")
        writer.stop()
        produced = writer.produced
        wait_until(
            lambda: delivered(0) and delta_txn_ids(table) >= set(produced),
            60,
            f"the Delta table catching up with the {len(produced)} transactions written",
        )
        assert query.isActive
        assert query.exception() is None
    finally:
        writer.halt()
        query.stop()
    rows = delta_changes(table)
    by_txn = whole_once(rows)
    assert {t: len(r) for t, r in by_txn.items()} == produced
    assert len({r["version"] for r in rows}) > 3, "batches before, between and after the moves"
    time.sleep(0.5)  # let the Python workers' stderr reach the capture
    err = workers_stderr(request)
    assert err is None or err, "no stderr of the JVM captured: where do the workers' logs go?"
    waited = _WAITING.findall(err or "")
    unexplained = [w for w in waited if not re.search(r"answered|made no progress|reconnects", w)]
    assert not unexplained, f"warnings of a wait that do not name its reason: {unexplained}"
