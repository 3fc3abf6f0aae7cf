"""Shared test configuration.

Tests import the *installed* package (``pip install .``): ``sources/`` and ``sinks/`` only exist
as ``spark_ckpt.sources`` / ``spark_ckpt.sinks`` after installation. Run pytest through the
README's test command, which installs first.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from harness import ROOT
from harness.servers.s3 import S3Server

# Every Spark JVM started from here on (sessions, crash drivers, Connect servers) reads the tests'
# spark-defaults.conf: interpreted expressions, measured cheaper for the tests' small batches.
os.environ.setdefault("SPARK_CONF_DIR", str(ROOT / "tests" / "spark-conf"))

settings.register_profile(
    "ci",
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.register_profile(
    "soak", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark everything under tests/integration as ``integration``."""
    for item in items:
        if f"{os.sep}integration{os.sep}" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One S3-protocol server (moto) on loopback for the whole test session."""
    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A fresh, empty bucket for one test; returns its name."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    return name
