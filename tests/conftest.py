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
from harness.servers.s3 import S3Server

# Every Spark driver the tests start (the test processes' sessions, the crash tests' drivers, the
# Connect servers) runs expressions and plans interpreted: spark-submit passes SPARK_SUBMIT_OPTS
# to the driver's JVM, and Spark's configuration takes the spark.* system properties. The tests'
# batches are a few rows, where Spark spent more driver CPU generating Java and compiling it with
# Janino (for each new projection, filter and plan) than on the rows. Measured side by side on
# four integration modules (test_delta_2pc, test_txn_cdc_streaming, test_mirror,
# test_supervisor; 36 tests, -n 2, alternating): driver JVM CPU 256-275 s -> 217-219 s, wall
# 246-263 s -> 227-232 s. What Spark computes is the same either way (Spark's own suites run
# both); bench/ and the demo keep Spark's defaults. (Not SPARK_CONF_DIR: it puts a directory on
# the driver's class path, where the crash drivers' class-data-sharing archive refuses one.)
INTERPRETED = ("spark.sql.codegen.wholeStage=false", "spark.sql.codegen.factoryMode=NO_CODEGEN")
_submit_opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
os.environ["SPARK_SUBMIT_OPTS"] = " ".join(
    [_submit_opts, *(f"-D{p}" for p in INTERPRETED if p.split("=")[0] not in _submit_opts)]
).strip()

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
