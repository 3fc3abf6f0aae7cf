"""Make the docs' history picture: a supervised query with one failure, then ``spark-ckpt plot``.

Streams a generated Debezium-format log (``txn-cdc`` -> ``delta-2pc``) under supervision while a
second writer appends to it; one task fails once (an injected error), so the query restarts from
its checkpoint. Then runs ``spark-ckpt plot`` on the checkpoint location, as a user would.

Run: ``.venv/bin/python examples/history_picture.py docs/history.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pyspark.sql.functions import col, udf

import spark_ckpt
from spark_ckpt.testing.debezium_log import random_log, write_log


def main() -> None:
    """Run the supervised query, then plot and print its history."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="the PNG to write")
    args = parser.parse_args()
    spark = spark_ckpt.local_session("history-picture")
    spark.conf.set("spark.ckpt.restartStrategy", "fixed-delay")
    spark.conf.set("spark.ckpt.restartStrategy.fixedDelay.delay", "2s")
    control = spark_ckpt.install(spark)
    with tempfile.TemporaryDirectory() as tmp:
        log, marker = Path(tmp) / "log", Path(tmp) / "fail-once"
        marker.touch()
        records, _ = random_log(random.Random(5), 360, max_size=12, interleave=3)
        step = len(records) // 6
        write_log(str(log), records[:step], [], first_file=0)

        def grow() -> None:  # the log grows while the query runs, cut mid-transaction
            for part in range(1, 6):
                time.sleep(4)
                end = len(records) if part == 5 else (part + 1) * step
                write_log(str(log), records[part * step : end], [], first_file=part)

        marker_path = str(marker)

        def guard(order, after):  # type: ignore[no-untyped-def]  # hints make PySpark guess a pandas UDF
            if order >= 150 and os.path.exists(marker_path):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(marker_path)
                raise RuntimeError("injected failure")
            return after

        guarded = udf(guard, "string")

        def build():  # type: ignore[no-untyped-def]
            frame = (
                spark.readStream.format("txn-cdc")
                .option("connector", "debezium-json")
                .option("maxChangesPerTrigger", "150")
                .load(str(log))
            )
            return (
                frame.withColumn("after", guarded(col("txn_order"), col("after")))
                .writeStream.format("delta-2pc")
                .option("path", str(Path(tmp) / "table"))
                .trigger(processingTime="1 second")
            )

        writer = threading.Thread(target=grow, daemon=True)
        writer.start()
        checkpoint = str(Path(tmp) / "ckpt")
        query = control.supervise(build, checkpoint_location=checkpoint, name="picture")
        writer.join(60)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the whole log is read (bounded)
            progress = query.query.lastProgress if query.query is not None else None
            if progress and progress["numInputRows"] == 0 and not writer.is_alive():
                break
            time.sleep(1)
        query.stop()
        spark.stop()
        script = Path(sys.executable).with_name("spark-ckpt")
        subprocess.run([str(script), "plot", checkpoint, "-o", args.output], check=True)
        subprocess.run([str(script), "history", checkpoint], check=True)


if __name__ == "__main__":
    main()
