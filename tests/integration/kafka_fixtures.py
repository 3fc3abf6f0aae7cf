"""One Apache Kafka broker (KRaft, one node) for the whole integration session, and Connect.

A plugin module rather than part of conftest.py; conftest.py brings the fixtures in with
``from kafka_fixtures import kafka_broker, kafka_connect``. The broker starts when the first test
asks for it; a Kafka Connect worker (``bench/kafka_connect.py``) per test module that asks.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_BENCH = str(Path(__file__).resolve().parents[2] / "bench")
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)
from kafka_broker import KafkaBroker  # noqa: E402  (bench/ is not a package)
from kafka_connect import KafkaConnect  # noqa: E402


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A real Kafka broker on loopback (bench/kafka_broker.py), stopped at the end."""
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
