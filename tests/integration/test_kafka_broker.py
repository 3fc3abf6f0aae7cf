"""The tests' Kafka broker is Apache Kafka: transactions, read_committed and restarts are real."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from harness.servers.kafka import KafkaBroker

pytestmark = pytest.mark.integration


def _read_all(broker: KafkaBroker, topic: str, isolation: str) -> list[bytes]:
    """Every record of ``topic``'s partitions a consumer with ``isolation`` sees, to the end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"read-{uuid.uuid4().hex[:8]}",  # required by librdkafka, never committed
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        values: list[bytes] = []
        at_end: set[int] = set()
        while len(at_end) < len(partitions):
            message = consumer.poll(30)
            assert message is not None, f"no record nor end of partition within 30 s on {topic}"
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                continue
            values.append(message.value())
        return values
    finally:
        consumer.close()


@pytest.mark.quick
def test_aborted_transactions_are_invisible_to_read_committed_and_survive_a_kill(
    kafka_broker: KafkaBroker,
) -> None:
    """A committed and an aborted producer transaction; a SIGKILL and a restart of the broker."""
    from confluent_kafka import Producer

    topic = f"t-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topic(topic, partitions=2)
    producer = Producer(
        {
            "bootstrap.servers": kafka_broker.bootstrap,
            "transactional.id": f"test-{topic}",
            "partitioner": "murmur2_random",  # Java's default partitioner, as Kafka Connect's
        }
    )
    producer.init_transactions(30)
    for outcome in ("commit", "abort"):
        producer.begin_transaction()
        for number in range(4):
            producer.produce(topic, key=str(number).encode(), value=f"{outcome}-{number}".encode())
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    committed = sorted(f"commit-{n}".encode() for n in range(4))
    aborted = sorted(f"abort-{n}".encode() for n in range(4))
    assert sorted(_read_all(kafka_broker, topic, "read_committed")) == committed
    assert sorted(_read_all(kafka_broker, topic, "read_uncommitted")) == sorted(
        committed + aborted
    ), "the aborted records are in the log, only hidden from read_committed"

    kafka_broker.kill()
    kafka_broker.restart()
    assert sorted(_read_all(kafka_broker, topic, "read_committed")) == committed
