"""The kafka connector's client: the ``kafka`` extra named when it is missing, librdkafka's logs.

Without confluent-kafka (the ``kafka`` extra) the connector fails at the query's start with a
typed error that says what to install, not with a bare ``ModuleNotFoundError`` from deep in a
Spark trace; its absence is simulated with ``sys.modules["confluent_kafka"] = None``, which makes
``import confluent_kafka`` fail as a missing package does. librdkafka's own log lines go through
Python's logging (a consumer with no broker to reach, on loopback).
"""

from __future__ import annotations

import logging
import sys
import time
import types

import pytest

from harness.servers.loopback import free_port
from spark_ckpt.errors import MissingExtraError, SparkCkptError
from spark_ckpt.model.options import OptionReader
from spark_ckpt.sources.kafka.client import LIBRDKAFKA_LOGGER, new_consumer, require_client
from spark_ckpt.sources.kafka.connector import build
from spark_ckpt.sources.kafka.offsets import KafkaOffset
from spark_ckpt.sources.kafka.options import KafkaOptions
from spark_ckpt.sources.kafka.planner import KafkaPlanner
from spark_ckpt.sources.kafka.reader import KafkaPartition, read_partition


def parse(**options: str) -> KafkaOptions:
    given = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "dbz.public.orders"}
    given.update(options)
    reader = OptionReader(
        {k.lower(): v for k, v in given.items()},
        "txn-cdc",
        KafkaOptions.NAMES,
        prefixes=KafkaOptions.PREFIXES,
    )
    return KafkaOptions.parse(reader)


COMMON = types.SimpleNamespace(gated=True, column_types=False)
"""The common options ``build`` reads."""


@pytest.fixture
def no_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """confluent-kafka not installed: importing it fails as a missing package does."""
    for name in [m for m in sys.modules if m.split(".")[0] == "confluent_kafka"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)


def _says_what_to_install(error: MissingExtraError) -> None:
    assert isinstance(error, SparkCkptError)
    assert isinstance(error, ImportError)
    assert error.extra == "kafka"
    assert error.name == "confluent_kafka"
    assert "pip install 'spark-ckpt[kafka]'" in str(error)
    assert "kafka connector" in str(error)


@pytest.mark.usefixtures("no_client")
def test_without_the_kafka_extra_the_query_start_names_the_extra_to_install() -> None:
    with pytest.raises(MissingExtraError) as info:
        build(parse(), COMMON)  # type: ignore[arg-type]
    _says_what_to_install(info.value)
    assert info.value.__cause__ is None
    assert info.value.__suppress_context__


@pytest.mark.usefixtures("no_client")
def test_without_the_kafka_extra_an_executors_read_names_it_too() -> None:
    part = KafkaPartition({"bootstrap.servers": "x:1"}, "t", 0, 0, 1, "kafka", (), (), ())
    with pytest.raises(MissingExtraError) as info:
        list(read_partition(part))
    _says_what_to_install(info.value)
    with pytest.raises(MissingExtraError):
        new_consumer({"bootstrap.servers": "x:1"}, "driver")


def test_with_the_extra_the_client_is_there() -> None:
    assert require_client().__name__ == "confluent_kafka"
    assert build(parse(), COMMON).name == "kafka"  # type: ignore[arg-type]


def _fails(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    """The broker connection failures (librdkafka's facility ``FAIL``) among ``records``."""
    return [r for r in records if r.name == LIBRDKAFKA_LOGGER and r.args and r.args[0] == "FAIL"]


def test_librdkafkas_log_lines_go_to_python_logging_not_stderr(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """The ``%3|...|FAIL|`` lines of librdkafka, one per attempt while no broker answers."""
    consumer = new_consumer({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, "test")
    try:
        with caplog.at_level(logging.DEBUG, logger=LIBRDKAFKA_LOGGER):
            deadline = time.monotonic() + 10
            while len(fails := _fails(caplog.records)) < 3:  # logs are served in consume()
                assert time.monotonic() < deadline, f"librdkafka's lines: {caplog.records}"
                consumer.consume(num_messages=1, timeout=0.2)
    finally:
        consumer.close()
    assert "Connection refused" in fails[0].getMessage()
    assert fails[0].levelno == logging.ERROR, "the first failure keeps its level: its reason shows"
    assert {r.levelno for r in fails[1:]} == {logging.INFO}, "each reconnect attempt again"
    assert "|FAIL|" not in capfd.readouterr().err


def test_transaction_topic_none_assembles_without_transactions() -> None:
    """``transactionTopic=none`` reaches the assembler: each change its own unit (DESIGN.md)."""
    none = KafkaPlanner(parse(transactionTopic="none"), KafkaOffset(-1, 0), None)  # type: ignore[arg-type]
    assert not none.assembler.transactions
    found = KafkaPlanner(parse(), KafkaOffset(-1, 0), None)  # type: ignore[arg-type]
    assert found.assembler.transactions
    named = KafkaPlanner(parse(transactionTopic="dbz.transaction"), KafkaOffset(-1, 0), None)  # type: ignore[arg-type]
    assert named.assembler.transactions
