"""The kafka connector on topics Debezium writes through Kafka Connect to a real broker.

Kafka Connect (standalone, ``harness.servers.kafka_connect``) runs Debezium's PostgreSQL connector
on the test database; the order items topic has three partitions, so a transaction's changes are
spread over several partitions of several topics besides the transaction topic. The connector is
driven as the reader framework drives it (plan, cut at the last unit, batch, read each partition),
with no Spark: every transaction must come out whole, in one batch, and the change log folded by key
must equal the tables.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import schema_migrations
from changelog_checks import whole_once
from conftest import wait_until
from debezium_postgres import KEYS, assert_folds_to_tables
from kafka_drive import connector_for, drain

import spark_ckpt
from harness.faults.debezium import delta_changes, delta_txn_ids
from harness.servers.kafka import KafkaBroker
from harness.servers.kafka_connect import KafkaConnect, debezium_postgres
from harness.servers.postgres import PgCluster
from harness.workloads import postgres as pg_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def test_debeziums_topics_come_out_whole_per_transaction_and_fold_to_the_tables(
    kafka_broker: KafkaBroker,
    kafka_connect: KafkaConnect,
    pg_server: PgCluster,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    prefix = f"k{uuid.uuid4().hex[:6]}"
    pg_workload.create_schema(pg_dsn, accounts=30)
    kafka_broker.create_topic(f"{prefix}.public.order_items", partitions=3)
    name = f"{prefix}-connector"
    kafka_connect.add_connector(
        name,
        debezium_postgres(
            pg_dsn, prefix=prefix, slot=f"slot_{prefix}", tables=",".join(pg_workload.TABLES)
        ),
    )
    kafka_connect.wait_running(name)
    try:
        workload = pg_workload.Workload(pg_dsn, transactions=60, seed=4, accounts=30).start()
        workload.join(240)
        committed = {str(xid) for xid in workload.committed}
        connector = connector_for(kafka_broker, prefix)
        rows, batches = drain(connector, committed | {"snapshot"}, 180)
    finally:
        kafka_connect.delete_connector(name)
    by_txn: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_txn[row["txn_id"]].append(row)
    for txn_id, txn_rows in by_txn.items():
        indexes = sorted(r["event_index"] for r in txn_rows)
        assert indexes == list(range(txn_rows[0]["txn_size"])), f"{txn_id} is not whole"
        assert sum(txn_id in b for b in batches) == 1, f"{txn_id} is in more than one batch"
    assert {t for t in by_txn if t != "snapshot"} == committed
    assert all(r["key"] for r in rows), "a row lacks the Kafka record's key"
    assert_folds_to_tables(rows, pg_dsn, KEYS)


def test_a_streaming_query_lands_each_transaction_in_one_delta_version(
    spark: SparkSession,
    control: spark_ckpt.Control,
    kafka_broker: KafkaBroker,
    kafka_connect: KafkaConnect,
    pg_server: PgCluster,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """txn-cdc (connector=kafka) -> delta-2pc: every transaction whole in one version, once.

    With minPartitions above the partitions' count, offset ranges are split, so one unit's
    records are read by several tasks.
    """
    prefix = f"k{uuid.uuid4().hex[:6]}"
    pg_workload.create_schema(pg_dsn, accounts=20)
    kafka_broker.create_topic(f"{prefix}.public.order_items", partitions=2)
    name = f"{prefix}-connector"
    kafka_connect.add_connector(
        name,
        debezium_postgres(
            pg_dsn, prefix=prefix, slot=f"slot_{prefix}", tables=",".join(pg_workload.TABLES)
        ),
    )
    kafka_connect.wait_running(name)
    table = tmp_path / "table"
    try:
        workload = pg_workload.Workload(pg_dsn, transactions=40, seed=5, accounts=20).start()
        query = (
            spark.readStream.format("txn-cdc")
            .option("connector", "kafka")
            .option("kafka.bootstrap.servers", kafka_broker.bootstrap)
            .option("subscribePattern", f"{prefix}[.].*")
            .option("maxChangesPerTrigger", "40")
            .option("minPartitions", "5")  # ranges split: a unit read by several tasks
            .load()
            .writeStream.format("delta-2pc")
            .option("path", str(table))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        workload.join(240)
        committed = {str(xid) for xid in workload.committed} | {"snapshot"}
        try:

            def caught_up() -> bool:
                if query.exception() is not None:
                    raise AssertionError(f"the query failed: {query.exception()}")
                return (table / "_delta_log").exists() and delta_txn_ids(table) >= committed

            wait_until(
                caught_up,
                180,
                f"the Delta table did not catch up with {len(committed)} transactions",
            )
        finally:
            query.stop()
    finally:
        kafka_connect.delete_connector(name)
    rows = delta_changes(table)
    by_txn = whole_once(rows)
    assert set(by_txn) == committed
    assert len({r["version"] for r in rows}) > 2, "everything landed in one version"
    assert_folds_to_tables(rows, pg_dsn, KEYS)


def test_a_mirror_follows_migrations_in_debeziums_topics(
    spark: SparkSession,
    control: spark_ckpt.Control,
    kafka_broker: KafkaBroker,
    kafka_connect: KafkaConnect,
    pg_server: PgCluster,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """Schema changes from the records' Connect schemas, through Kafka Connect and a broker.

    The migration sequence of ``schema_migrations.follow_debezium_postgres`` on a table whose
    topic has two partitions: after each step the mirror equals the table; the rename, which no
    record can tell from a drop and an add, stops the query with nothing of it published.
    """
    prefix = f"s{uuid.uuid4().hex[:6]}"
    schema_migrations.create_postgres_tables(pg_dsn)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    kafka_broker.create_topic(f"{prefix}.public.products", partitions=2)
    name = f"{prefix}-connector"
    tables = f"{schema_migrations.PRODUCTS},{schema_migrations.TAGS}"
    kafka_connect.add_connector(
        name,
        debezium_postgres(
            pg_dsn,
            prefix=prefix,
            slot=f"slot_{prefix}",
            tables=tables,
            extra={"decimal.handling.mode": "precise", "column.propagate.source.type": ".*"},
        ),
    )
    kafka_connect.wait_running(name)
    root = tmp_path / "mirror"
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap)
        .option("subscribePattern", f"{prefix}[.].*")
        .option("columnTypes", "true")
        .load()
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", str(root))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        schema_migrations.follow_debezium_postgres(spark, query, pg_dsn, root)
    finally:
        query.stop()
        kafka_connect.delete_connector(name)
