"""The kafka connector's bad input and faults, on the real broker, with records Debezium wrote.

Each test writes the records Debezium 3.6.1 wrote through Kafka Connect
(``tests/fixtures/kafka/postgres-3.6.1``, see :mod:`kafka_drive`) into topics of its own, then
breaks something the way production breaks it: retention deletes records the query has not
read, a topic is deleted or created again, a transaction's events never arrive, a record is not
Debezium's, the broker is down at the start or stops in the middle of a batch, a Kafka
transaction aborts, partitions and topics appear while the query runs, and the client's SASL
password must never be shown. The connector is driven as the reader framework drives it; the
held-back bound goes through a Spark query.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from changelog_checks import whole_once
from conftest import wait_until
from kafka_drive import (
    TransactionWriter,
    connector_for,
    fixture_records,
    fixture_units,
    read_batch,
    replay,
    rows_of,
)

import spark_ckpt
from harness.faults.debezium import delta_changes, delta_txn_ids
from harness.servers.kafka import KafkaBroker
from harness.servers.loopback import free_port
from spark_ckpt.errors import (
    CheckpointPolicyError,
    DataLossError,
    MalformedEventError,
    SourceConnectionError,
)
from spark_ckpt.sources.gate import Cut

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

FAST = {"kafkaConsumer.pollTimeoutMs": "4000", "snapshotSettle": "1ms"}
"""Faults must surface in seconds here: reading gives up after 4 s without progress."""


def fresh() -> str:
    return f"f{uuid.uuid4().hex[:8]}"


def admin(broker: KafkaBroker) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def delete_before(broker: KafkaBroker, topic: str, partition: int, offset: int) -> None:
    """Delete a partition's records below ``offset``, as retention does."""
    from confluent_kafka import TopicPartition

    client = admin(broker)  # kept: the futures resolve only while their client lives
    futures = client.delete_records([TopicPartition(topic, partition, offset)])
    for future in futures.values():
        future.result(timeout=30)


def delete_topic(broker: KafkaBroker, topic: str) -> None:
    """Delete ``topic``; return once the broker's metadata no longer has it."""
    client = admin(broker)
    client.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
    wait_until(
        lambda: topic not in client.list_topics(timeout=10).topics,
        30,
        f"{topic} still listed after its deletion",
    )


def first_transaction_offset(topic: str, partition: int) -> tuple[int, str]:
    """The fixture offset of the first change inside a transaction, and that transaction's id."""
    for record in fixture_records()[(topic, partition)]:
        payload = json.loads(record["value"])["payload"] if record["value"] else None
        if payload and payload.get("transaction"):
            return record["offset"], payload["transaction"]["id"]
    raise AssertionError(f"no transaction's change in {topic}/{partition}")


def read_the_snapshot(broker: KafkaBroker, prefix: str) -> dict[str, Any]:
    """A query's first batch (the snapshot) read, then the query stopped: its end offset."""
    connector = connector_for(broker, prefix, **FAST)
    try:
        start = connector.initial_offset()
        deadline = time.monotonic() + 30
        while not (sizes := connector.plan(start, None).unit_sizes):
            assert time.monotonic() < deadline, "no unit was planned"
            time.sleep(0.2)
        batch = connector.batch(Cut(0, sizes[0], sizes[0], True), 0)
        assert {r["txn_id"] for r in rows_of(connector, batch)} == {"snapshot"}
        return dict(batch.end)
    finally:
        connector.stop()


def test_records_deleted_before_they_were_read_fail_the_query_naming_where(
    kafka_broker: KafkaBroker,
) -> None:
    """failOnDataLoss=true (the default): a typed error naming topic, partition and range."""
    prefix = fresh()
    replay(kafka_broker, prefix)
    end = read_the_snapshot(kafka_broker, prefix)
    position = end["topics"][f"{prefix}.public.orders"]["0"]
    offset, _ = first_transaction_offset("public.orders", 0)
    assert offset >= position
    delete_before(kafka_broker, f"{prefix}.public.orders", 0, offset + 1)
    restarted = connector_for(kafka_broker, prefix, **FAST)
    try:
        with pytest.raises(DataLossError) as info:
            restarted.plan(end, None)
    finally:
        restarted.stop()
    message = str(info.value)
    where = f"offsets {position} to {offset} of {prefix}.public.orders/0 are no longer in Kafka"
    assert where in message
    assert "failOnDataLoss=false" in message, "the message names the way out"


def test_with_fail_on_data_loss_false_deleted_records_are_skipped_counted_and_logged(
    kafka_broker: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """The transaction that lost a change is held back with its reason; the rest is delivered."""
    prefix = fresh()
    replay(kafka_broker, prefix)
    end = read_the_snapshot(kafka_broker, prefix)
    position = end["topics"][f"{prefix}.public.orders"]["0"]
    offset, txn = first_transaction_offset("public.orders", 0)
    delete_before(kafka_broker, f"{prefix}.public.orders", 0, offset + 1)
    restarted = connector_for(kafka_broker, prefix, failOnDataLoss="false", **FAST)
    try:
        with caplog.at_level(logging.WARNING, logger="spark_ckpt.sources.kafka.planner"):
            plan = restarted.plan(end, None)
        status = restarted.status()
    finally:
        restarted.stop()
    assert status is not None
    assert status["skipped"]["lost"] == offset + 1 - position
    assert any(
        f"{prefix}.public.orders/0" in r.getMessage() and "skipped" in r.getMessage()
        for r in caplog.records
    ), "no warning names the skipped records"
    assert plan.held_back is not None
    assert f"transaction '{postgres_name(txn)}'" in plan.held_back.message, plan.held_back


def postgres_name(txn: str) -> str:
    """The unit name of a Debezium PostgreSQL transaction id ``<xid>:<lsn>``: its xid."""
    return txn.split(":")[0]


def test_records_deleted_after_the_batch_was_planned_fail_its_read(
    kafka_broker: KafkaBroker,
) -> None:
    """An executor cannot read a planned unit whole: a typed error, not a jump or a hang."""
    prefix = fresh()
    written = replay(kafka_broker, prefix)
    connector = connector_for(kafka_broker, prefix, failOnDataLoss="false", **FAST)
    try:
        batch = wait_for_batch(connector, connector.initial_offset())
        topic = f"{prefix}.public.orders"
        delete_before(kafka_broker, topic, 0, written[("public.orders", 0)])
        [part] = [p for p in batch.partitions if (p.topic, p.partition) == (topic, 0)]
        began = time.monotonic()
        with pytest.raises(DataLossError, match=f"records of {topic}/0 "):
            list(connector.read(part))
        assert time.monotonic() - began < 20, "the deletion surfaced only after a stall"
    finally:
        connector.stop()


def wait_for_batch(connector: Any, start: dict[str, Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while (batch := read_batch(connector, start, 0)) is None:
        assert time.monotonic() < deadline, "no unit was planned"
        time.sleep(0.2)
    return batch


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_deleted_topic(kafka_broker: KafkaBroker, fail_on_data_loss: str) -> None:
    """true: a typed error naming the topic and how far it was read; false: no longer read."""
    prefix = fresh()
    replay(kafka_broker, prefix)
    connector = connector_for(kafka_broker, prefix, failOnDataLoss=fail_on_data_loss, **FAST)
    try:
        batch = wait_for_batch(connector, connector.initial_offset())
        rows_of(connector, batch)
        delete_topic(kafka_broker, f"{prefix}.public.items")
        if fail_on_data_loss == "true":
            with pytest.raises(DataLossError, match=f"the topic '{prefix}.public.items' was"):
                connector.plan(batch.end, None)
        else:
            connector.plan(batch.end, None)
            status = connector.status()
            assert status is not None
            assert status["deletedTopics"] == [f"{prefix}.public.items"]
    finally:
        connector.stop()


def test_a_topic_created_again_fails_whatever_fail_on_data_loss_says(
    kafka_broker: KafkaBroker,
) -> None:
    """The checkpoint's offsets name records of a topic that no longer exists."""
    prefix = fresh()
    replay(kafka_broker, prefix)
    connector = connector_for(kafka_broker, prefix, failOnDataLoss="false", **FAST)
    try:
        batch = wait_for_batch(connector, connector.initial_offset())
        topic = f"{prefix}.public.orders"
        read_to = json.loads(json.dumps(batch.end))["topics"][topic]["0"]
        assert read_to > 1
        delete_topic(kafka_broker, topic)
        kafka_broker.create_topic(topic)
        with pytest.raises(DataLossError, match=f"the offsets of {topic}/0 went back"):
            connector.plan(batch.end, None)
    finally:
        connector.stop()


def test_a_malformed_record_is_a_typed_error_naming_topic_partition_and_offset(
    kafka_broker: KafkaBroker,
) -> None:
    from confluent_kafka import Producer

    prefix = fresh()
    written = replay(kafka_broker, prefix)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce(f"{prefix}.public.orders", value=b'{"payload": {"op": "c", oops', partition=0)
    assert producer.flush(30) == 0
    connector = connector_for(kafka_broker, prefix, **FAST)
    try:
        with pytest.raises(MalformedEventError) as info:
            connector.plan(connector.initial_offset(), None)
    finally:
        connector.stop()
    where = f"{prefix}.public.orders/0"
    assert where in str(info.value)
    assert str(written[("public.orders", 0)]) in str(info.value)


def test_the_broker_down_at_the_start_is_a_bounded_typed_failure_with_the_reason() -> None:
    nobody = f"127.0.0.1:{free_port()}"
    connector = connector_for(nobody, fresh(), **FAST)
    began = time.monotonic()
    try:
        with pytest.raises(SourceConnectionError) as info:
            connector.plan(connector.initial_offset(), None)
    finally:
        connector.stop()
    assert time.monotonic() - began < 30, "not bounded by kafkaConsumer.pollTimeoutMs"
    assert "kafka.bootstrap.servers" in str(info.value)


def test_the_broker_stopping_in_the_middle_of_a_batch_fails_its_read_then_it_reads_again(
    kafka_broker: KafkaBroker,
) -> None:
    """The read fails typed within the poll timeout; after a restart the same batch reads whole."""
    prefix = fresh()
    replay(kafka_broker, prefix)
    connector = connector_for(kafka_broker, prefix, **FAST)
    try:
        start = connector.initial_offset()
        batch = wait_for_batch(connector, start)
        kafka_broker.stop()
        try:
            with pytest.raises(SourceConnectionError, match="made no progress"):
                rows_of(connector, batch)
        finally:
            kafka_broker.restart()
        rows = rows_of(connector, batch)
    finally:
        connector.stop()
    again = connector_for(kafka_broker, prefix, **FAST)
    try:
        replanned = wait_for_batch(again, start)
        assert replanned.end == batch.end
        assert sorted(map(_row_key, rows)) == sorted(map(_row_key, rows_of(again, replanned)))
    finally:
        again.stop()


def test_an_unsupervised_query_survives_a_broker_sigkilled_and_back_after_15_s(
    spark: SparkSession, control: spark_ckpt.Control, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """A running query, topics of 3 partitions: every transaction lands once and whole.

    Transactions are written all along (Debezium's form, from the fixture's records) while the
    broker is SIGKILLed and started again 15 s later (it answers 25 to 30 s after the kill on
    two busy cores); the query runs unsupervised with the default kafkaConsumer.pollTimeoutMs
    (120 s). Reported from a cluster of three-partition topics: while a broker restarts,
    librdkafka may answer offset requests at once with ``NOT_LEADER_FOR_PARTITION`` or
    ``_UNKNOWN_PARTITION``, which the planner retries (``tests/unit/test_kafka_watermarks.py``
    scripts those answers, and metadata requests' ``_TRANSPORT``); on this one broker the
    requests waited instead, and executors' reads in flight waited for the broker. Each
    transaction produced (and acknowledged) is compared with the Delta table: once, whole, in
    one version.
    """
    prefix = fresh()
    partitions = 3
    kafka_broker.create_topic(f"{prefix}.public.orders", partitions=partitions)
    kafka_broker.create_topic(f"{prefix}.transaction")
    writer = TransactionWriter(kafka_broker.bootstrap, prefix, partitions)
    table = tmp_path / "table"
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap)
        .option("subscribePattern", f"{prefix}[.].*")
        .option("snapshotSettle", "1ms")
        .load()
        .writeStream.format("delta-2pc")
        .option("path", str(table))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    writer.start()
    try:
        wait_until(lambda: len(delta_txn_ids(table)) >= 5, 60, "the query delivering")
        kafka_broker.kill()
        time.sleep(15)
        kafka_broker.restart()
        time.sleep(3)  # written after the restart too
        writer.stop()
        produced = writer.produced

        def caught_up() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            return delta_txn_ids(table) >= set(produced)

        wait_until(caught_up, 120, f"the Delta table did not catch up with {len(produced)}")
        assert query.isActive
        assert query.exception() is None
    finally:
        writer.halt()
        query.stop()
    rows = delta_changes(table)
    by_txn = whole_once(rows)
    assert {t: len(r) for t, r in by_txn.items()} == produced
    assert len({r["version"] for r in rows}) > 2


def test_without_a_transaction_topic_a_streaming_query_delivers_each_change_as_its_unit(
    spark: SparkSession, control: spark_ckpt.Control, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """transactionTopic=none on Debezium's topics, whose records carry a transaction block.

    Reported: every change waited in a transaction for an END that is never read, and a
    query delivered nothing. The table topics are subscribed by name (the transaction topic is
    not read), the query streams (processingTime); each change must come out as a unit of its
    own, the initial snapshot as one.
    """
    prefix = fresh()
    replay(kafka_broker, prefix)
    records = fixture_records()
    tables = sorted({t for t, _ in records if t != "transaction"})
    changes = {
        f"{prefix}.{topic}/{partition}:{record['offset']}"
        for (topic, partition), items in records.items()
        if topic != "transaction"
        for record in items
        if record["value"]
        and json.loads(record["value"])["payload"]["source"]["snapshot"] in ("false", "incremental")
    }
    table = tmp_path / "table"
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap)
        .option("subscribe", ",".join(f"{prefix}.{t}" for t in tables))
        .option("transactionTopic", "none")
        .option("snapshotSettle", "1ms")
        .option("maxChangesPerTrigger", "10")
        .load()
        .writeStream.format("delta-2pc")
        .option("path", str(table))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:

        def caught_up() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            return delta_txn_ids(table) >= changes | {"snapshot"}

        wait_until(caught_up, 60, f"the {len(changes)} changes were not all delivered")
    finally:
        query.stop()
    rows = delta_changes(table)
    by_unit = whole_once(rows)
    assert set(by_unit) == changes | {"snapshot"}
    assert len(by_unit["snapshot"]) == 6
    assert all(len(by_unit[c]) == 1 and by_unit[c][0]["txn_size"] == 1 for c in changes)
    assert len({r["version"] for r in rows}) > 2, "every change in one version"


def _row_key(row: dict[str, Any]) -> tuple[str, int]:
    return (row["txn_id"], row["event_index"])


def _plain_change(number: int) -> bytes:
    """A Debezium change record without transaction metadata (each one its own unit)."""
    [record] = [
        r
        for r in fixture_records()[("public.orders", 0)]
        if r["value"] and json.loads(r["value"])["payload"].get("transaction")
    ][:1]
    body = json.loads(record["value"])
    body["payload"]["transaction"] = None
    body["payload"]["after"]["id"] = number
    return json.dumps(body).encode()


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_records_of_an_aborted_kafka_transaction_never_appear(
    kafka_broker: KafkaBroker, isolation: str
) -> None:
    """Written as Kafka Connect's exactly-once source support writes (KIP-618).

    read_committed, the default, delivers only committed records; read_uncommitted (set by the
    user) shows the aborted ones too, which proves they are there to be skipped.
    """
    from confluent_kafka import Producer

    prefix = fresh()
    topic = f"{prefix}.plain"
    kafka_broker.create_topic(topic)
    producer = Producer(
        {"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"{prefix}-tx"}
    )
    producer.init_transactions(30)
    for numbers, commit in (((1, 2, 3), False), ((4, 5), True)):
        producer.begin_transaction()
        for number in numbers:
            producer.produce(topic, value=_plain_change(number), partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    options = {"transactionTopic": "none", "kafka.isolation.level": isolation, **FAST}
    connector = connector_for(kafka_broker, prefix, **options)
    try:
        rows = rows_of(connector, wait_for_batch(connector, connector.initial_offset()))
    finally:
        connector.stop()
    ids = sorted(json.loads(r["after"])["id"] for r in rows)
    assert ids == ([4, 5] if isolation == "read_committed" else [1, 2, 3, 4, 5])


def test_debeziums_records_written_in_kafka_transactions_read_as_written_plainly(
    kafka_broker: KafkaBroker,
) -> None:
    """Commit markers take offsets no record has: planning and reading step over them."""
    plain, transactional = fresh(), fresh()
    replay(kafka_broker, plain)
    replay(kafka_broker, transactional, producer_config={"transactional.id": transactional})
    assert fixture_units(kafka_broker, transactional) == {
        u.replace(plain, transactional) for u in fixture_units(kafka_broker, plain)
    }


def test_partitions_added_and_topics_matching_later_are_read_from_their_start(
    kafka_broker: KafkaBroker,
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewPartitions

    prefix = fresh()
    replay(kafka_broker, prefix)
    connector = connector_for(kafka_broker, prefix, transactionTopic="none", **FAST)
    try:
        start = connector.initial_offset()
        first = wait_for_batch(connector, start)
        rows_of(connector, first)
        items = f"{prefix}.public.items"
        client = admin(kafka_broker)
        client.create_partitions([NewPartitions(items, 3)])[items].result(30)
        kafka_broker.create_topic(f"{prefix}.public.late")
        producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
        producer.produce(items, value=_plain_change(70), partition=2)
        producer.produce(items, value=_plain_change(71), partition=2)
        producer.produce(f"{prefix}.public.late", value=_plain_change(72), partition=0)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 30
        found: list[dict[str, Any]] = []
        end = first.end
        wanted = {f"{items}/2:0", f"{items}/2:1", f"{prefix}.public.late/0:0"}
        while not wanted <= {r["txn_id"] for r in found}:
            assert time.monotonic() < deadline, f"read so far: {[r['txn_id'] for r in found]}"
            batch = read_batch(connector, end, 1)
            if batch is None:
                time.sleep(0.3)
                continue
            found += rows_of(connector, batch)
            end = batch.end
    finally:
        connector.stop()
    assert sorted(json.loads(r["after"])["id"] for r in found) == [70, 71, 72]


def test_a_sasl_password_never_reaches_errors_logs_or_status(
    kafka_broker: KafkaBroker, caplog: pytest.LogCaptureFixture
) -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    options = {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="reader" password="{secret}";'
        ),
        **FAST,
    }
    connector = connector_for(kafka_broker, fresh(), **options)
    assert connector.options.client["sasl.password"] == secret, "passed through to librdkafka"
    try:
        with caplog.at_level(logging.DEBUG), pytest.raises(SourceConnectionError) as info:
            connector.plan(connector.initial_offset(), None)
    finally:
        connector.stop()
    shown = [str(info.value), repr(info.value), repr(connector.options), caplog.text]
    shown.append(json.dumps(connector.status()))
    assert not [s for s in shown if secret in s]


def test_an_end_whose_events_never_arrive_is_held_back_visibly_then_fails_the_query(
    spark: SparkSession, control: spark_ckpt.Control, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """Through Spark: progress events say what is held and why, then the bound fails the query.

    Past softDeclineTimeout the query fails naming the transaction.
    """
    prefix = fresh()
    offset, txn = first_transaction_offset("public.orders", 0)
    replay(kafka_broker, prefix, leave_out={("public.orders", 0): {offset}})
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap)
        .option("subscribePattern", f"{prefix}[.].*")
        .option("snapshotSettle", "1ms")
        .option("softDeclineTimeout", "8s")
        .load()
        .writeStream.format("delta-2pc")
        .option("path", str(tmp_path / "table"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:

        def held() -> dict[str, Any] | None:
            progress = query.lastProgress
            if progress is None:
                return None
            found = json.loads(progress["sources"][0]["latestOffset"]).get("heldBack")
            return found if isinstance(found, dict) else None

        wait_until(lambda: held() is not None, 60, "a progress event with heldBack")
        shown = held()
        assert shown is not None
        assert f"transaction '{postgres_name(txn)}'" in shown["reason"], shown
        with pytest.raises(CheckpointPolicyError) as info:
            control.await_termination(query, 60)
    finally:
        if query.isActive:
            query.stop()
    assert "exceeded softDeclineTimeout=8s without progress" in str(info.value)
    assert f"transaction '{postgres_name(txn)}'" in str(info.value)
