"""Generated change logs and the supervised queries over them (integration and Connect tests).

``failing_writer`` builds a query whose tasks raise while a marker file exists: the failure a
supervisor restarts from.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql.functions import col, udf

from spark_ckpt.testing.debezium_log import GeneratedTxn, random_log, write_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter


def generated(directory: Path, seed: int) -> list[GeneratedTxn]:
    rng = random.Random(seed)
    records, expected = random_log(rng, 40, max_size=8, interleave=3)
    write_log(str(directory), records, [len(records) // 2])
    return expected


def failing_writer(
    spark: SparkSession, log: Path, table: Path, marker: Path | None, always: bool = False
) -> Callable[[], DataStreamWriter]:
    """build() for a txn-cdc -> delta-2pc query whose tasks raise while ``marker`` exists."""
    marker_path = str(marker) if marker else ""

    def guard(order, after):  # type: ignore[no-untyped-def]  # hints make PySpark guess a pandas UDF
        if marker_path and order >= 15 and os.path.exists(marker_path):
            if not always:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(marker_path)
            raise RuntimeError(f"injected failure at txn_order {order}")
        return after

    guarded = udf(guard, "string")

    def build() -> DataStreamWriter:
        frame = (
            spark.readStream.format("txn-cdc")
            .option("connector", "debezium-json")
            .option("maxChangesPerTrigger", "30")
            .load(str(log))
        )
        frame = frame.withColumn("after", guarded(col("txn_order"), col("after")))
        return (
            frame.writeStream.format("delta-2pc")
            .option("path", str(table))
            .trigger(availableNow=True)
        )

    return build


def table_notes(spark: SparkSession, table: Path | str) -> list[str]:
    rows = spark.read.format("delta").load(str(table)).orderBy("txn_order", "event_index").collect()
    return [json.loads(row.after)["note"] for row in rows]


def expected_notes(expected: list[GeneratedTxn]) -> list[str]:
    return [event["after"]["note"] for txn in expected for event in txn.events]
