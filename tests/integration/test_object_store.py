"""The txn-cdc -> delta-2pc pipeline with its table and checkpoint on an S3-protocol server.

Spark writes the checkpoint through s3a (hadoop-aws); spark-ckpt reads it and writes manifests,
intents, history and staged files through pyarrow's S3 client; delta-rs commits with
conditional puts; delta-spark reads the table back through s3a. The credentials come only from
the session's ``spark.hadoop.fs.s3a.*`` keys, which ``spark_ckpt.install`` captures.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from changelog_checks import whole_once

import spark_ckpt
from harness.servers.s3 import SECRET_KEY, S3Server
from harness.workloads.delta_versions import added_rows
from harness.workloads.streams import expected_notes, generated, table_notes
from spark_ckpt.model.events import StartEvent
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.state.storage import Location, StorageOptions
from spark_ckpt.testing.debezium_log import write_log
from spark_ckpt.testing.shop_workload import ITEMS, ORDERS, ShopWorkload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter


def pipeline(spark: SparkSession, log: Path, table: str, checkpoint: str) -> DataStreamWriter:
    """txn-cdc over the local log -> delta-2pc on S3, bounded (``availableNow``)."""
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", "30")
        .load(str(log))
        .writeStream.format("delta-2pc")
        .option("path", table)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )


def assert_each_transaction_in_one_version(table: str, storage: Mapping[str, str]) -> None:
    """Every version adds whole transactions only, and none twice.

    What each version added is read with delta-rs (one read per file, not a delta-spark job per
    version through s3a); the tests read the newest version with delta-spark as well.
    """
    whole_once(added_rows(table, storage, columns=["txn_id", "event_index", "txn_size"]))


@pytest.mark.quick
def test_pipeline_on_s3_publishes_every_transaction_once(
    spark: SparkSession,
    control: spark_ckpt.Control,
    s3_server: S3Server,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    """Every source transaction is in exactly one Delta version on S3; a restart adds none."""
    expected = generated(tmp_path / "log", seed=14)
    root = f"s3a://{s3_bucket}/{uuid.uuid4().hex[:8]}"
    table, checkpoint = f"{root}/table", f"{root}/ckpt"

    def run() -> None:
        query = pipeline(spark, tmp_path / "log", table, checkpoint).start()
        assert query.awaitTermination(300), "the availableNow query did not finish in 300s"
        assert query.exception() is None, str(query.exception())

    run()
    run()  # a restart from the checkpoint on S3: nothing new, nothing published twice
    assert sorted(table_notes(spark, table)) == sorted(expected_notes(expected))
    assert_each_transaction_in_one_version(table, s3_server.options())

    storage = StorageOptions.of(s3_server.options())
    ckpt = SparkCheckpoint(checkpoint, storage)
    batches = ckpt.committed_batches()
    assert len(batches) >= 2, "several batches ran"
    published = [r.checkpoint_id for r in HistoryLog(ckpt).records() if r.delta_version is not None]
    assert published == batches, "every checkpoint was published, in order, per the history"
    assert not Location(f"{checkpoint}/delta_2pc/staging", storage).list(recursive=True)
    leaked = [
        e.name
        for prefix in (checkpoint, table)
        for e in Location(prefix, storage).list(recursive=True)
        if SECRET_KEY.encode() in (Location(f"{prefix}/{e.name}", storage).read_bytes() or b"")
    ]
    assert not leaked, f"the secret key was written to {leaked}"


def test_a_supervised_query_restores_from_its_checkpoint_on_s3(
    spark: SparkSession,
    control: spark_ckpt.Control,
    s3_server: S3Server,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    """The supervisor reads its restore point, history and hooks on S3 with the session's keys.

    The second supervised run resumes from the first one's last checkpoint, found on S3.
    """
    expected = generated(tmp_path / "log", seed=15)
    root = f"s3a://{s3_bucket}/{uuid.uuid4().hex[:8]}"
    table, checkpoint = f"{root}/table", f"{root}/ckpt"

    def build() -> DataStreamWriter:
        return pipeline(spark, tmp_path / "log", table, checkpoint)

    for run in range(2):
        supervised = control.supervise(build, checkpoint_location=checkpoint, name=f"s3-{run}")
        assert supervised.await_termination(300), f"supervised run {run} did not finish in 300s"
    assert sorted(table_notes(spark, table)) == sorted(expected_notes(expected))

    ckpt = SparkCheckpoint(checkpoint, StorageOptions.of(s3_server.options()))
    starts = [e for e in HistoryLog(ckpt).events() if isinstance(e, StartEvent)]
    assert [s.restored for s in starts] == [None, ckpt.latest_committed()]


def test_mirror_mode_on_s3_reads_consistently_through_s3a(
    spark: SparkSession, control: spark_ckpt.Control, s3_bucket: str, tmp_path: Path
) -> None:
    """Mirrors, index and checkpoint on S3; read_consistent through Spark's s3a, exact."""
    workload = ShopWorkload(seed=4)
    records: list[dict[str, Any]] = []
    for number in range(25):
        records += workload.debezium_records(workload.step(), f"s3-{number}", number)
    write_log(str(tmp_path / "log"), records, [len(records) // 2])
    root = f"s3a://{s3_bucket}/{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", "20")
        .load(str(tmp_path / "log"))
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", f"{root}/shop")
        .option("checkpointLocation", f"{root}/ckpt")
        .trigger(availableNow=True)
        .start()
    )
    assert control.await_termination(query, 300), "the availableNow query did not finish"
    tables = spark_ckpt.read_consistent(spark, f"{root}/shop")
    for name in (ORDERS, ITEMS):
        mirrored = {tuple(sorted(r.asDict().items())) for r in tables[name].collect()}
        expected = {tuple(sorted(r.items())) for r in workload.rows[name].values()}
        assert mirrored == expected, name
