"""A Python streaming source that decodes nothing: what Spark's Python data source path costs.

``passthrough_run`` replays rows a connector wrote (read back from its Delta table) in the same
batches, through a Python streaming source whose ``read()`` only slices an Arrow file, into any
sink. Set beside a connector's run on the same rows, it bounds what any decoder could reach:
the rest of the time is Spark's. Used by ``postgres_cdc.py`` and ``debezium_vs_spark_json.py``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from pyspark import cloudpickle

__all__ = ["Replay", "Timed", "busy_cpu_seconds", "passthrough_run"]


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy (every process, every core) since boot."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class Timed:
    """Batch seconds, busy CPU seconds and rows of one ``Trigger.availableNow`` run."""

    def __init__(self, control: Any, query: Any, began: float, cpu: float) -> None:
        if not control.await_termination(query, 1800):
            raise SystemExit("a benchmark run did not finish within 30 minutes")
        ended = time.perf_counter()
        self.wall = ended - began  # the whole run, query start to termination
        self.cpu = busy_cpu_seconds() - cpu
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        self.rows = sum(int(p["numInputRows"]) for p in progress)
        self.batches = [int(p["numInputRows"]) for p in progress]
        self.durations = [p["durationMs"] for p in progress]
        # Batches run back to back: from the first data batch's trigger to the end of the last.
        self.seconds = sum(int(p["batchDuration"]) for p in progress) / 1000
        self.startup = (ended - began) - self.seconds
        # The query's startup (planning, Python worker launch) is not part of either rate. Its
        # CPU cannot be told apart in /proc/stat, so the run's busy CPU is pro-rated to the
        # batches' share of the wall time: an estimate, which ceiling_cpu inherits.
        self.cpu *= self.seconds / (ended - began)
        # Planning (the source's latestOffset) inside the batches' time.
        self.planning = sum(int(d.get("latestOffset", 0)) for d in self.durations) / 1000


class Replay:
    """The pass-through source: replays an Arrow file in given batches, decoding nothing.

    Offsets are batch numbers; each batch is split in two partitions (the connector also gives
    both executor cores work). Defined here, pickled to the executors by value.
    """

    def __init__(self, path: str, batches: list[int]) -> None:
        self.path, self.batches = path, batches

    def reader(self) -> Any:
        """The stream reader (runs in Spark's Python planner and workers)."""
        from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
        from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

        path, bounds = self.path, [0]
        for size in self.batches:
            bounds.append(bounds[-1] + size)

        class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
            def initialOffset(self) -> dict[str, int]:
                return {"batch": 0}

            def prepareForTriggerAvailableNow(self) -> None:
                pass

            def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
                return {"batch": min(start["batch"] + 1, len(bounds) - 1)}

            def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
                first, last = bounds[start["batch"]], bounds[end["batch"]]
                middle = (first + last) // 2
                return [InputPartition((first, middle)), InputPartition((middle, last))]

            def read(self, partition: Any) -> Any:
                import pyarrow as pa

                first, last = partition.value
                with pa.memory_map(path) as source:
                    table = pa.ipc.open_file(source).read_all().slice(first, last - first)
                    yield from table.combine_chunks().to_batches(8192)

        return Reader()


def passthrough_run(
    spark: Any, control: Any, table: Path, workdir: Path, batches: list[int], sink: str
) -> Timed:
    """Replay the connector's output rows, read back from its table, into ``sink``."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql.datasource import DataSource

    from spark_ckpt.sources.schema import SPARK_DDL

    rows = (
        DeltaTable(str(table))
        .to_pyarrow_table()
        .sort_by([("txn_order", "ascending"), ("event_index", "ascending")])
    )
    path = str(workdir / "rows.arrow")
    with pa.OSFile(path, "wb") as out, pa.ipc.new_file(out, rows.schema) as writer:
        writer.write_table(rows)
    replay = Replay(path, batches)

    class Passthrough(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return "bench-passthrough"

        def schema(self) -> str:
            return SPARK_DDL

        def streamReader(self, schema: Any) -> Any:
            return replay.reader()

    # The reader is pickled to the Python workers by value: this module is not installed there.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(Passthrough)
    cpu, began = busy_cpu_seconds(), time.perf_counter()
    query = (
        spark.readStream.format("bench-passthrough")
        .load()
        .writeStream.format(sink)
        .option("path", str(workdir / f"replayed-{sink}"))
        .option("checkpointLocation", str(workdir / f"replayed-{sink}-ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    return Timed(control, query, began, cpu)
