"""A cluster driver that asks its executors where their Python and native modules come from.

Run as ``python cluster_probe.py CONF_JSON`` (a client-mode driver of the test cluster); prints
one JSON list, one entry per task: the executor's interpreter, both native modules' files and
the task's working directory.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any


def _where(_: Iterator[Any]) -> Iterator[tuple[str, str, str, str]]:
    """Runs on an executor, in a Python worker: import both native modules and say from where."""
    import os

    import spark_ckpt.sources.debezium_format._native as debezium
    import spark_ckpt.sources.postgres._native as postgres

    yield sys.executable, str(debezium.__file__), str(postgres.__file__), os.getcwd()


def main() -> None:
    import spark_ckpt

    conf = json.loads(sys.argv[1])
    master = conf.pop("spark.master")
    spark = spark_ckpt.local_session("cluster-probe", master=master, conf=conf)
    tasks = int(conf.get("spark.cores.max", "2"))
    found = spark.sparkContext.parallelize(range(tasks), tasks).mapPartitions(_where).collect()
    print(json.dumps(found), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
