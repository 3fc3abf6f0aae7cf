"""How local_session sets Spark up.

Its Python processes import the installed pyspark, not the copy in pyspark.zip, Delta rebuilds
table state with one partition per core, and packages reach Spark as jars resolved once.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pyspark import cloudpickle

from spark_ckpt.errors import PackageResolutionError
from spark_ckpt.spark.packages import package_jars
from spark_ckpt.spark.session import (
    CHECKPOINT_FILE_MANAGER_KEY,
    LOCAL_CHECKPOINT_FILE_MANAGER,
    local_cores,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Functions and classes here reach the workers by value: this module is not installed there.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _origin(_: Any) -> str:
    import pyspark

    return pyspark.__file__ or ""


def test_a_local_session_rebuilds_delta_state_with_one_partition_per_core(
    spark: SparkSession,
) -> None:
    """Delta's default of 50 partitions made every read of a small table's version 3x slower."""
    assert spark.conf.get("spark.databricks.delta.snapshotPartitions") == "2"  # local[2]
    assert (local_cores("local"), local_cores("local[3]"), local_cores("local[4,2]")) == (1, 3, 4)
    assert local_cores("local[*]") >= 1


def test_a_local_session_writes_checkpoint_logs_with_the_filesystem_manager(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Fewer processes per micro-batch; the offset and commit logs still end up whole."""
    assert spark.conf.get(CHECKPOINT_FILE_MANAGER_KEY) == LOCAL_CHECKPOINT_FILE_MANAGER
    spark.range(5).write.format("delta").save(str(tmp_path / "in"))
    checkpoint = tmp_path / "ckpt"
    query = (
        spark.readStream.format("delta")
        .load(str(tmp_path / "in"))
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "an availableNow query over 5 rows ran 120 s"
    for log in ("offsets", "commits"):
        names = sorted(p.name for p in (checkpoint / log).iterdir())
        # Batch 0, its checksum; no temporary file left behind by the rename.
        assert [n for n in names if not n.endswith(".crc")] == ["0"], (log, names)


def test_task_workers_import_pyspark_with_cached_bytecode(spark: SparkSession) -> None:
    """local_session starts workers through spark-ckpt-python (the daemon and its forks)."""
    origins = spark.sparkContext.parallelize([0, 1], 2).map(_origin).collect()
    assert len(origins) == 2
    assert all(".zip" not in origin for origin in origins), origins


def test_a_streaming_source_runner_imports_pyspark_with_cached_bytecode(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The process each streaming query starts for a Python source (its offsets show it)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
        def initialOffset(self) -> dict[str, str]:
            import pyspark  # runs in the streaming source runner, a process of its own

            return {"pyspark": pyspark.__file__ or ""}

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def latestOffset(self, start: dict[str, str], limit: Any) -> dict[str, str]:
            return self.initialOffset()

        def partitions(self, start: Any, end: Any) -> list[Any]:
            return [InputPartition(0)]

        def read(self, partition: Any) -> Any:
            return iter(())

    class Origin(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "pyspark-origin"

        def schema(self) -> str:
            return "x int"

        def streamReader(self, schema: Any) -> Any:
            return Reader()

    spark.dataSource.register(Origin)
    query = (
        spark.readStream.format("pyspark-origin")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "the query did not finish within 120 s"
    progress = query.recentProgress
    assert progress, "the query made no progress"
    offset = progress[-1]["sources"][0]["endOffset"]
    assert "pyspark" in offset, offset
    assert ".zip" not in offset, offset


def test_a_package_ivy_cannot_resolve_is_a_typed_error_quoting_ivy(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolved in a JVM of its own, beside this process's session; nothing is remembered."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    missing = "io.delta:spark-ckpt-no-such-artifact_2.13:0.0.1"
    with pytest.raises(PackageResolutionError, match="spark-ckpt-no-such-artifact") as failed:
        package_jars([missing], {})
    assert "not found" in str(failed.value), "Ivy's own lines are quoted"
    assert not list(tmp_path.rglob("*.json"))
    assert spark.range(2).count() == 2  # the session beside it is untouched


def test_a_session_names_its_packages_to_spark_by_the_jars_they_resolved_to(
    spark: SparkSession,
) -> None:
    """No resolution at a session start once resolved: Spark gets jars, not coordinates."""
    assert not spark.conf.get("spark.jars.packages", "")
    jars = spark.conf.get("spark.jars", "") or ""
    assert any("delta-spark_" in jar for jar in jars.split(",")), jars
