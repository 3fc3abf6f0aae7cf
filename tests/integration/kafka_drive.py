"""Driving the kafka connector without Spark, and topics filled with records Debezium wrote.

``connector_for`` builds the connector as ``txn-cdc`` would from options; ``drain`` drives it as
the reader framework does (plan, cut at the last unit, batch, read each partition) until the
wanted units came out. ``replay`` writes the records of ``tests/fixtures/kafka/postgres-3.6.1``
(every record Debezium 3.6.1 wrote through Kafka Connect for a snapshot, six transactions, a
Connect SIGKILL and its repeats, and an incremental snapshot) into a fresh set of topics, partition
by partition in their offset order, so the fault tests read what Debezium really writes without
a Connect worker. ``TransactionWriter`` writes Debezium's form of transactions all along, as a
running capture does, while a test breaks the brokers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from changelog_checks import Row

from harness.servers.kafka import KafkaBroker
from harness.workloads.kafka_records import (
    debezium_transaction,
    fixture_records,
)
from spark_ckpt.model.options import OptionReader
from spark_ckpt.sources.gate import Cut
from spark_ckpt.sources.kafka.connector import KafkaConnector
from spark_ckpt.sources.kafka.options import KafkaOptions


def connector_for(broker: KafkaBroker | str, prefix: str, **options: str) -> KafkaConnector:
    """The connector on every topic of ``prefix`` (``<prefix>.*``), with extra options."""
    bootstrap = broker if isinstance(broker, str) else broker.bootstrap
    given = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribepattern": f"{prefix}[.].*",
        **options,
    }
    reader = OptionReader(given, "txn-cdc", KafkaOptions.NAMES, prefixes=KafkaOptions.PREFIXES)
    return KafkaConnector(KafkaOptions.parse(reader))


def read_batch(connector: KafkaConnector, start: dict[str, Any], checkpoint: int) -> Any:
    """Plan from ``start`` and cut after every unit planned; None when there is none."""
    plan = connector.plan(start, None)
    sizes = plan.unit_sizes
    if not sizes:
        return None
    return connector.batch(Cut(len(sizes) - 1, sizes[-1], sum(sizes), True), checkpoint)


def rows_of(connector: KafkaConnector, batch: Any) -> list[Row]:
    """Every row of a batch, read partition by partition as executors read them."""
    found: list[Row] = []
    for part in batch.partitions:
        for record_batch in connector.read(part):
            found += record_batch.to_pylist()
    return found


def drain(
    connector: KafkaConnector,
    want: set[str],
    timeout: float,
    start: dict[str, Any] | None = None,
) -> tuple[list[Row], list[set[str]]]:
    """Plan, cut and read batches until every id of ``want`` was delivered; rows and batches."""
    start = connector.initial_offset() if start is None else start
    rows: list[Row] = []
    batches: list[set[str]] = []
    deadline = time.monotonic() + timeout
    checkpoint = 0
    while not want <= {r["txn_id"] for r in rows}:
        assert time.monotonic() < deadline, (
            f"{len(want - {r['txn_id'] for r in rows})} units not delivered in "
            f"{timeout:.0f}s; held back: {connector.plan(start, None).held_back}"
        )
        batch = read_batch(connector, start, checkpoint)
        if batch is None:
            time.sleep(0.5)
            continue
        checkpoint += 1
        found = rows_of(connector, batch)
        rows += found
        batches.append({r["txn_id"] for r in found})
        start = batch.end
    return rows, batches


def replay(
    broker: KafkaBroker,
    prefix: str,
    *,
    leave_out: Mapping[tuple[str, int], set[int]] | None = None,
    producer_config: Mapping[str, str] | None = None,
) -> dict[tuple[str, int], int]:
    """Write the fixture's records to ``<prefix>.<topic>`` (created here); records per partition.

    ``leave_out`` names fixture offsets not written, per (topic, partition).
    """
    from confluent_kafka import Producer

    records = fixture_records()
    counts: dict[str, int] = {}
    for topic, partition in records:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    for topic, partitions in counts.items():
        broker.create_topic(f"{prefix}.{topic}", partitions=partitions)
    config = {"bootstrap.servers": broker.bootstrap, **(producer_config or {})}
    producer = Producer(config)
    transactional = "transactional.id" in config
    if transactional:  # as Kafka Connect's exactly-once source support writes (KIP-618)
        producer.init_transactions(30)
        producer.begin_transaction()
    written: dict[tuple[str, int], int] = {}
    for (topic, partition), items in records.items():
        skip = (leave_out or {}).get((topic, partition), set())
        for item in items:
            if item["offset"] in skip:
                continue
            producer.produce(
                f"{prefix}.{topic}",
                value=None if item["value"] is None else item["value"].encode(),
                key=None if item["key"] is None else item["key"].encode(),
                partition=partition,
            )
            written[(topic, partition)] = written.get((topic, partition), 0) + 1
    if transactional:
        producer.commit_transaction(30)
    left = producer.flush(30)
    assert left == 0, f"{left} records were not acknowledged by the broker within 30 s"
    return written


def fixture_units(broker: KafkaBroker, prefix: str, timeout: float = 60) -> set[str]:
    """The unit ids a full read of a replayed fixture delivers (every unit, nothing held)."""
    connector = connector_for(broker, prefix, snapshotSettle="1ms")
    try:
        start = connector.initial_offset()
        ids: set[str] = set()
        deadline = time.monotonic() + timeout
        checkpoint = 0
        while True:
            batch = read_batch(connector, start, checkpoint)
            if batch is None:
                plan = connector.plan(start, None)
                if not plan.held_back and not plan.unit_sizes:
                    return ids
                assert time.monotonic() < deadline, f"held back: {plan.held_back}"
                time.sleep(0.2)
                continue
            checkpoint += 1
            ids |= {r["txn_id"] for r in rows_of(connector, batch)}
            start = batch.end
    finally:
        connector.stop()


class TransactionWriter:
    """Debezium's records of one transaction after another, written from a thread.

    Transactions of 1 to 4 order inserts (:func:`debezium_transaction`, spread over
    ``partitions`` partitions), one every ``pause`` seconds, by an idempotent producer (acks from
    every in-sync replica) as Kafka Connect's producer writes: a broker restart or a leader
    change is retried by the client, never duplicated. ``produced`` maps each transaction id
    written to its number of changes.
    """

    def __init__(self, bootstrap: str, prefix: str, partitions: int, pause: float = 0.1) -> None:
        from confluent_kafka import Producer

        self.prefix = prefix
        self.partitions = partitions
        self.pause = pause
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        )
        self.produced: dict[str, int] = {}
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, daemon=True)

    def _delivered(self, error: Any, _message: Any) -> None:
        if error is not None:
            self.failed.append(str(error))

    def _write(self) -> None:
        xid = 1000
        while not self._stop.is_set():
            xid += 1
            ids = [xid * 10 + i for i in range(1 + xid % 4)]
            for topic, partition, key, value in debezium_transaction(
                self.prefix, xid, xid * 1000, ids, self.partitions
            ):
                self.producer.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=self._delivered
                )
            self.produced[str(xid)] = len(ids)
            self.producer.poll(0)
            time.sleep(self.pause)

    def start(self) -> None:
        """Start writing."""
        self._thread.start()

    def halt(self) -> None:
        """Stop writing, checking nothing (a test's cleanup)."""
        self._stop.set()

    def stop(self, timeout: float = 60) -> None:
        """Stop writing; return once the brokers acknowledged every record (bounded)."""
        self._stop.set()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the writer did not stop within {timeout:.0f}s"
        left = self.producer.flush(timeout)
        assert left == 0, f"{left} records not acknowledged within {timeout:.0f}s"
        assert not self.failed, f"deliveries failed: {self.failed[:3]}"
