"""A Spark Connect client of a local Connect server, shared by the whole connect session.

pyspark starts the server from its bundled ``spark-connect`` jar in this process, so these tests
run in a pytest process of their own (``tests/integration/test_connect_process.py`` starts one
within the main run): a classic SparkSession and a Connect server cannot share one Python process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

import spark_ckpt
from spark_ckpt import local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The Connect client session (Delta configured on the server)."""
    session = local_session("spark-ckpt-connect-tests", connect=True)
    assert type(session).__module__.startswith("pyspark.sql.connect"), "not a Connect client"
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(scope="session")
def control(spark: SparkSession) -> spark_ckpt.Control:
    """The control plane, installed through the Connect client."""
    return spark_ckpt.install(spark)
