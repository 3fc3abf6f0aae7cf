"""A cluster driver that asks its executors where their Python and native modules come from.

Run as ``python cluster_probe.py OUT LOG TABLE CHECKPOINT SETTINGS`` (a client-mode driver of
the test cluster, ``SETTINGS`` as :class:`harness.faults.crash.Settings` writes them): writes one
JSON list to ``OUT``, one entry per task (the executor's interpreter, both native modules' files
and the task's working directory), then streams as :func:`harness.faults.crash.drive` does, in
the same session: the executors that answered run the stream's tasks. One driver for both saves
the test command a second driver and a second pair of executors unpacking the environment.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.faults import crash


def _where(_: Iterator[Any]) -> Iterator[tuple[str, str, str, str]]:
    """Runs on an executor, in a Python worker: import both native modules and say from where."""
    import os

    import spark_ckpt.sources.debezium_format._native as debezium
    import spark_ckpt.sources.postgres._native as postgres

    yield sys.executable, str(debezium.__file__), str(postgres.__file__), os.getcwd()


def main() -> None:
    out, log, table, checkpoint, settings_json = sys.argv[1:]
    settings = crash.Settings.from_json(settings_json)
    tasks = int(settings.conf.get("spark.cores.max", "2"))

    def probe(spark: Any) -> None:
        found = spark.sparkContext.parallelize(range(tasks), tasks).mapPartitions(_where).collect()
        Path(out).write_text(json.dumps(found), encoding="utf-8")

    crash.drive(log, table, checkpoint, settings=settings, before=probe)


if __name__ == "__main__":
    main()
