"""spark-ckpt through a Spark Connect client: formats, listener, supervision, savepoints.

Only public APIs reach the server: the data sources are registered with
``spark.dataSource.register``, the listener with ``spark.streams.addListener`` (Spark 4 runs it
in the client), and the supervisor drives queries through the client's ``StreamingQuery``.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import spark_ckpt
from harness.workloads.streams import expected_notes, failing_writer, generated, table_notes
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.testing.debezium_log import random_log, write_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.connect


@pytest.mark.quick
def test_a_plain_query_is_exact_and_its_history_is_kept(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    expected = generated(tmp_path / "log", 21)
    query = (
        failing_writer(spark, tmp_path / "log", tmp_path / "table", None)()
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    assert control.await_termination(query, 300), "the query did not finish"
    assert table_notes(spark, tmp_path / "table") == expected_notes(expected)
    records = HistoryLog(SparkCheckpoint(str(tmp_path / "ckpt"))).records()
    assert records, "the client-side listener recorded the history"
    assert all(r.completed and r.delta_version is not None for r in records)


def test_a_supervised_query_is_restarted_and_resumes_exactly(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    expected = generated(tmp_path / "log", 22)
    marker = tmp_path / "fail-once"
    marker.touch()
    spark.conf.set("spark.ckpt.restartStrategy", "fixed-delay")
    try:
        supervised = control.supervise(
            failing_writer(spark, tmp_path / "log", tmp_path / "table", marker),
            checkpoint_location=str(tmp_path / "ckpt"),
            name="connect-restart",
        )
        assert supervised.await_termination(300), "the supervised query did not finish"
    finally:
        spark.conf.unset("spark.ckpt.restartStrategy")
    assert supervised.restarts == 1
    assert table_notes(spark, tmp_path / "table") == expected_notes(expected)


def test_stop_with_savepoint_and_restore(
    spark: SparkSession, control: spark_ckpt.Control, tmp_path: Path
) -> None:
    expected = generated(tmp_path / "log", 23)
    first = control.supervise(
        failing_writer(spark, tmp_path / "log", tmp_path / "table", None),
        checkpoint_location=str(tmp_path / "ckpt"),
        name="connect-savepoint",
    )
    assert first.await_termination(300)
    savepoint = first.stop_with_savepoint(str(tmp_path / "savepoints"), drain=True)
    records, more = random_log(random.Random(24), 20, max_size=6, id_prefix="after")
    write_log(str(tmp_path / "log"), records, [], first_file=90)  # arrives after the savepoint
    second = control.supervise(
        failing_writer(spark, tmp_path / "log", tmp_path / "table", None),
        checkpoint_location=str(tmp_path / "ckpt2"),
        name="connect-restored",
        restore_from=savepoint,
    )
    assert second.await_termination(300)
    assert table_notes(spark, tmp_path / "table") == expected_notes(expected + more)
