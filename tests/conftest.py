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

from harness import schedule
from harness.driver_options import interpret_drivers
from harness.servers.s3 import S3Server

# Every Spark driver the tests start runs expressions interpreted (harness.driver_options).
interpret_drivers(os.environ)

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


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """Mark everything under tests/integration as ``integration``; modules longest first.

    The mark goes on before ``-m`` deselects; the order is made after, of the modules that
    run. It is what the test command's processes take the modules in (``harness.schedule``;
    scripts/test.sh passes ``--no-loadscope-reorder`` so that xdist keeps it).
    """
    for item in items:
        if f"{os.sep}integration{os.sep}" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    yield
    modules = list(dict.fromkeys(item.nodeid.split("::")[0] for item in items))
    rank = {m: i for i, m in enumerate(schedule.module_order(modules, schedule.load_seconds()))}
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


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
