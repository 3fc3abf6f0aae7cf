"""One Apache Kafka broker (KRaft, one node) for the whole integration session.

A plugin module rather than part of conftest.py; conftest.py brings the fixture in with
``from kafka_fixtures import kafka_broker``. The broker starts when the first test asks for it.
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


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A real Kafka broker on loopback (bench/kafka_broker.py), stopped at the end."""
    broker = KafkaBroker(tempfile.mkdtemp(prefix="spark-ckpt-kafka-"))
    broker.start()
    yield broker
    broker.stop()
    shutil.rmtree(broker.workdir, ignore_errors=True)
