"""Queries whose sink is not ``delta-2pc`` start and run under ``install()`` without a traceback.

The control plane asks every query, as it starts, for its checkpoint root and its sink's name
(to restore only its own sink's queries). A sink of Spark's first data source API (Delta's own
sink, ``foreachBatch``, console, memory; Kafka's too) is a table whose ``name()`` throws
("should not be called"): that used to log a traceback, twice, for each such query (the demo's
output showed it). Kafka's sink is the same kind of sink as these (its test would need a broker).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import wait_until

import spark_ckpt
from spark_ckpt.spark.control import query_target

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _write(frame: DataFrame, sink: str, tmp_path: Path) -> Any:
    writer = frame.writeStream.option("checkpointLocation", str(tmp_path / "ckpt"))
    if sink == "delta":
        return writer.format("delta").option("path", str(tmp_path / "table"))
    if sink == "foreachBatch":
        return writer.foreachBatch(lambda batch, _: batch.count())
    if sink == "memory":
        return writer.format("memory").queryName(f"other_sinks_{tmp_path.name}")
    return writer.format(sink)


@pytest.mark.parametrize("sink", ["delta", "foreachBatch", "console", "memory"])
def test_a_query_of_another_sink_starts_under_install_without_a_traceback(
    spark: SparkSession,
    control: spark_ckpt.Control,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    sink: str,
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.json").write_text('{"id": 1}\n{"id": 2}\n')
    frame = spark.readStream.schema("id long").json(str(tmp_path / "in"))
    with caplog.at_level(logging.WARNING, logger="spark_ckpt"):
        query = _write(frame, sink, tmp_path).trigger(processingTime="1 hour").start()
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
