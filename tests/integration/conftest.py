"""One SparkSession (with Delta) for the whole integration test session."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

import spark_ckpt
from spark_ckpt import local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] session with Delta, shared by every integration test."""
    session = local_session("spark-ckpt-tests")
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(scope="session")
def control(spark: SparkSession) -> spark_ckpt.Control:
    """The control plane, installed once into the shared session."""
    return spark_ckpt.install(spark)


@pytest.fixture
def restart_conf(spark: SparkSession) -> Iterator[Callable[..., None]]:
    """Set spark.ckpt.* keys for one test; unset them afterwards."""
    touched: list[str] = []

    def set_conf(**settings: str) -> None:
        for key, value in settings.items():
            name = "spark.ckpt." + key.replace("__", ".")
            spark.conf.set(name, value)
            touched.append(name)

    yield set_conf
    for name in touched:
        spark.conf.unset(name)


def wait_until(predicate: Callable[[], bool], timeout: float, message: str) -> None:
    """Poll ``predicate`` until true; fail with ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {message}")
        time.sleep(0.1)
