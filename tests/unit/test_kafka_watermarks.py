"""The planner's offset requests: transient broker errors retried within the poll timeout.

A fake consumer (the client's answers, scripted) stands in for librdkafka: while a broker
restarts it answers ``NOT_LEADER_FOR_PARTITION`` or ``_UNKNOWN_PARTITION`` at once, which must
cost only the wait; an authorization error fails at once, naming it.
"""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from spark_ckpt.errors import SourceConnectionError
from spark_ckpt.sources.kafka.client import is_transient, partitions_of
from spark_ckpt.sources.kafka.planner import KafkaPlanner


class ScriptedConsumer:
    """Answers ``get_watermark_offsets`` with the scripted errors first, then ``(0, 42)``."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def get_watermark_offsets(self, *_: Any, **__: Any) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 0, 42


def _watermarks(consumer: ScriptedConsumer, poll_timeout: float = 30.0) -> tuple[int, int]:
    planner = types.SimpleNamespace(
        consumer=consumer, timeout=1.0, options=types.SimpleNamespace(poll_timeout=poll_timeout)
    )
    return KafkaPlanner.watermarks(planner, ("t", 0))  # type: ignore[arg-type]


def test_a_restarting_brokers_answers_are_retried_until_it_answers() -> None:
    consumer = ScriptedConsumer(
        KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._UNKNOWN_PARTITION, KafkaError._TRANSPORT
    )
    assert _watermarks(consumer) == (0, 42)
    assert consumer.calls == 4


def test_a_refusal_fails_at_once_naming_it() -> None:
    consumer = ScriptedConsumer(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(SourceConnectionError, match="TOPIC_AUTHORIZATION_FAILED"):
        _watermarks(consumer)
    assert consumer.calls == 1


def test_a_broker_not_back_within_the_poll_timeout_fails_saying_how_long_it_waited() -> None:
    consumer = ScriptedConsumer(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 100)
    with pytest.raises(SourceConnectionError, match=r"for 1s .*NOT_LEADER_FOR_PARTITION"):
        _watermarks(consumer, poll_timeout=1.0)
    assert 2 <= consumer.calls < 100


def test_what_counts_as_transient() -> None:
    assert is_transient(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
    assert not is_transient(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))


class ScriptedMetadata:
    """Answers ``list_topics`` with the scripted errors first, then one topic of 3 partitions."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.calls = 0

    def list_topics(self, *_: Any, **__: Any) -> Any:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        topic = types.SimpleNamespace(partitions={0: None, 1: None, 2: None})
        return types.SimpleNamespace(topics={"dbz.public.orders": topic})


def test_a_metadata_request_retries_a_restarting_broker_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer = ScriptedMetadata(KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    with caplog.at_level(logging.WARNING, logger="spark_ckpt.sources.kafka.client"):
        found = partitions_of(consumer, ("dbz.public.orders",), None, timeout=1, patience=30)  # type: ignore[arg-type]
    assert found == {"dbz.public.orders": 3}
    assert consumer.calls == 3
    [warning] = caplog.records
    assert "a metadata request" in warning.getMessage()
    assert "_TRANSPORT" in warning.getMessage()


def test_a_metadata_request_without_patience_fails_at_once_as_before() -> None:
    consumer = ScriptedMetadata(KafkaError._TRANSPORT)
    with pytest.raises(SourceConnectionError, match="did not answer a metadata request"):
        partitions_of(consumer, ("dbz.public.orders",), None, timeout=1)  # type: ignore[arg-type]
    assert consumer.calls == 1


def test_behind_sums_each_partitions_end_less_where_the_next_batch_starts() -> None:
    """The exported Kafka lag: deleted topics' partitions and unknown ones do not count."""
    planner = types.SimpleNamespace(
        latest={0: 50, 1: 10, 2: 99, 3: 7}, starts=[40, 10, 0], gone={2}
    )
    assert KafkaPlanner.behind(planner) == 10  # type: ignore[arg-type]
