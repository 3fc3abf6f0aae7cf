"""One Apache Kafka broker (KRaft, one node) for the whole integration session, and Connect.

A plugin module rather than part of conftest.py; conftest.py brings the fixtures in with
``from kafka_fixtures import kafka_broker, kafka_connect``. The broker starts when the first test
asks for it; a Kafka Connect worker (:mod:`harness.servers.kafka_connect`) per test module that
asks.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest

from harness.servers.kafka import KafkaBroker
from harness.servers.kafka_connect import KafkaConnect


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A real Kafka broker on loopback (harness.servers.kafka), stopped at the end."""
    broker = KafkaBroker(tempfile.mkdtemp(prefix="spark-ckpt-kafka-"))
    broker.start()
    yield broker
    broker.stop()
    shutil.rmtree(broker.workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def kafka_connect(kafka_broker: KafkaBroker) -> Iterator[KafkaConnect]:
    """One Connect worker for a test module, each test adding its own connector."""
    connect = KafkaConnect(tempfile.mkdtemp(prefix="spark-ckpt-connect-"), kafka_broker.bootstrap)
    connect.start()
    yield connect
    connect.stop()
    shutil.rmtree(connect.workdir, ignore_errors=True)
