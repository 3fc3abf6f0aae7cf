"""A transaction larger than the driver's buffer and than a partition, on the real server."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from test_postgres_cdc import plain_query, run_to_end, sql

import spark_ckpt

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROWS = 40_000


def bounded_query(spark: SparkSession, dsn: str, tmp_path: Path, plugin: str) -> Any:
    """availableNow, snapshot=never, a 64 kB driver buffer and partitions of 5,000 changes."""
    return plain_query(
        spark,
        dsn,
        tmp_path,
        "cdc_large",
        "public.big",
        plugin,
        snapshot="never",
        streamBufferSize="64k",
        changesPerPartition="5000",
    )


def test_a_transaction_beyond_the_buffer_and_a_partition_lands_whole_in_one_version(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
) -> None:
    """A 40,000-row UPDATE: spilled by the driver, split over 8 partitions, one Delta version.

    Every version of the table holds all of the transaction or none of it; its rows carry one
    txn_id, txn_size 40,000 and every event index once. The spill does not outlive the next
    run.
    """
    from delta.tables import DeltaTable

    sql(
        pg_dsn,
        "CREATE TABLE big (id int PRIMARY KEY, v text)",
        f"INSERT INTO big SELECT g, 'x' FROM generate_series(1, {ROWS}) g",
    )
    run_to_end(control, bounded_query(spark, pg_dsn, tmp_path, pg_plugin))  # creates the slot
    sql(
        pg_dsn,
        "INSERT INTO big VALUES (0, 'before')",
        "UPDATE big SET v = 'y' || id WHERE id > 0",
        "DELETE FROM big WHERE id = 0",
    )
    run_to_end(control, bounded_query(spark, pg_dsn, tmp_path, pg_plugin))
    table = str(tmp_path / "table")
    frame = spark.read.format("delta").load(table)
    updates = frame.where("op = 'u'")
    assert updates.count() == ROWS
    (single,) = updates.select("txn_id", "txn_size", "txn_order").distinct().collect()
    assert single.txn_size == ROWS
    indexes = sorted(r.event_index for r in updates.select("event_index").collect())
    assert indexes == list(range(ROWS))
    others = frame.where(f"txn_order <> {single.txn_order}").orderBy("txn_order").collect()
    assert [(r.op, r.txn_order < single.txn_order) for r in others] == [("c", True), ("d", False)]
    # All of it or none of it in every version.
    versions = [r.version for r in DeltaTable.forPath(spark, table).history().collect()]
    for version in versions:
        at = spark.read.format("delta").option("versionAsOf", version).load(table)
        assert at.where(f"txn_id = '{single.txn_id}'").count() in (0, ROWS), version
    assert DeltaTable.forPath(spark, table).detail().collect()[0].numFiles >= ROWS // 5000
    # What the driver spilled is deleted once read: by the stop of the source when Spark calls
    # it, else by the next run before it reads anything.
    run_to_end(control, bounded_query(spark, pg_dsn, tmp_path, pg_plugin))
    stream_spill = tmp_path / "spill" / "stream"
    assert not stream_spill.exists() or not any(stream_spill.iterdir())
