"""Queries whose sink is not ``delta-2pc`` start and run under ``install()`` without a traceback.

The control plane asks every query, as it starts, for its checkpoint root and its sink's name
(to restore only its own sink's queries). A sink of Spark's first data source API (Delta's own
sink, ``foreachBatch``, console, memory) is a table whose ``name()`` throws ("should not be
called"): that used to log a traceback, twice, for each such query (the demo's output showed
it). Spark's Kafka sink (``format("kafka")``) is a DSv2 table, ``KafkaTable``, named so; it
writes to the session's real broker, and its records are read back with confluent-kafka.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import wait_until

import spark_ckpt
from harness.servers.kafka import KafkaBroker
from spark_ckpt.spark.control import query_target

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _write(frame: DataFrame, sink: str, tmp_path: Path, broker: KafkaBroker | None) -> Any:
    if sink == "kafka":
        assert broker is not None
        frame = frame.selectExpr("CAST(id AS STRING) AS value")
    writer = frame.writeStream.option("checkpointLocation", str(tmp_path / "ckpt"))
    if sink == "kafka":
        assert broker is not None
        return (
            writer.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", _topic(tmp_path))
        )
    if sink == "delta":
        return writer.format("delta").option("path", str(tmp_path / "table"))
    if sink == "foreachBatch":
        return writer.foreachBatch(lambda batch, _: batch.count())
    if sink == "memory":
        return writer.format("memory").queryName(f"other_sinks_{tmp_path.name}")
    return writer.format(sink)


def _topic(tmp_path: Path) -> str:
    return f"other-sinks-{tmp_path.name}"


def _read_back(broker: KafkaBroker, topic: str, count: int, timeout: float = 30) -> list[str]:
    """The values of the first ``count`` records of ``topic`` (partition 0), read from its start."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"read-{topic}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[str] = []
        deadline = time.monotonic() + timeout
        while len(values) < count:
            assert time.monotonic() < deadline, f"{topic} held only {values} after {timeout:.0f}s"
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            values.append(message.value().decode())
        return values
    finally:
        consumer.close()


@pytest.mark.parametrize("sink", ["delta", "foreachBatch", "console", "memory", "kafka"])
def test_a_query_of_another_sink_starts_under_install_without_a_traceback(
    spark: SparkSession,
    control: spark_ckpt.Control,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
    sink: str,
) -> None:
    # The session's broker only for Kafka's sink: the other sinks' tests never start it.
    broker: KafkaBroker | None = None
    if sink == "kafka":
        broker = request.getfixturevalue("kafka_broker")
        assert broker is not None
        broker.create_topic(_topic(tmp_path))
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.json").write_text('{"id": 1}\n{"id": 2}\n')
    frame = spark.readStream.schema("id long").json(str(tmp_path / "in"))
    with caplog.at_level(logging.WARNING, logger="spark_ckpt"):
        query = _write(frame, sink, tmp_path, broker).trigger(processingTime="1 hour").start()
        try:
            # onQueryStarted runs with start(): the control plane has looked at the query.
            target = query_target(spark, str(query.id))
            assert target is not None, "the query is active"
            root, name = target
            assert root.endswith("ckpt"), root
            assert name not in ("", "delta-2pc"), name
            wait_until(
                lambda: (
                    sum(p.numInputRows for p in query.recentProgress) >= 2
                    or query.exception() is not None
                ),
                120,
                f"the {sink} query did not read its two rows",
            )
        finally:
            query.stop()
    assert query.exception() is None
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not problems, [r.getMessage() for r in problems]
    if broker is not None:
        assert sorted(_read_back(broker, _topic(tmp_path), 2)) == ["1", "2"]
