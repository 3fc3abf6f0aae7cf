"""Checkpoints and tables written by an earlier release restore with today's code.

``tests/fixtures/compat-92f3d90`` was written by spark-ckpt at 92f3d90, before the layout
changed (``tests/fixtures/make_compat_fixture.py`` says how): two published batches and a third
whose manifest is durable but whose ``commits/2`` was never written (the driver was killed). Its
offsets predate the ``consumed`` record. No module path is stored in any of these files, so a
move of modules must not matter: today's code re-runs batch 2 from the logged offsets, publishes
it, and goes on with new data, every transaction exactly once and whole.
"""

from __future__ import annotations

import json
import random
import shutil
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import spark_ckpt
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.testing.debezium_log import random_log, write_log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "compat-92f3d90"
ROOT = Path("/tmp/spark-ckpt-compat-92f3d90")  # the sink recorded the table's absolute path


def test_a_checkpoint_written_before_the_layout_change_restores_exactly(
    spark: SparkSession, control: spark_ckpt.Control
) -> None:
    """The logged batch 2 is re-run and published, then new data follows; nothing lost or twice."""
    shutil.rmtree(ROOT, ignore_errors=True)
    shutil.copytree(FIXTURE, ROOT)
    expected: list[list[str]] = json.loads((ROOT / "expected.json").read_text())
    records, more = random_log(random.Random(7), 8, max_size=5, interleave=2, id_prefix="new")
    write_log(str(ROOT / "log"), records, [], first_file=3)
    expected += [[e["after"]["note"] for e in t.events] for t in more]

    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", "10")
        .load(str(ROOT / "log"))
        .writeStream.format("delta-2pc")
        .option("path", str(ROOT / "table"))
        .option("checkpointLocation", str(ROOT / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    assert control.await_termination(query, 300), "the restored query did not finish"

    table = spark.read.format("delta").load(str(ROOT / "table"))
    rows = table.orderBy("txn_order", "event_index").select("txn_order", "after").collect()
    notes = [json.loads(r.after)["note"] for r in rows]
    assert notes == [note for txn in expected for note in txn], "every change once, in order"

    # Every Delta version adds whole transactions: batch 2 was published once, not torn.
    path = str(ROOT / "table")
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count()
    before: set[tuple[int, int]] = set()
    for version in range(versions):
        rows_at = spark.read.format("delta").option("versionAsOf", version).load(path).collect()
        now = {(r.txn_order, r.event_index) for r in rows_at}
        size = {r.txn_order: r.txn_size for r in rows_at}
        added: dict[int, int] = defaultdict(int)
        for order, _ in now - before:
            added[order] += 1
        assert all(n == size[order] for order, n in added.items()), f"version {version} is torn"
        before = now

    history = HistoryLog(SparkCheckpoint(str(ROOT / "ckpt"))).records()
    by_id = {r.checkpoint_id: r for r in history}
    assert by_id[0].delta_version == 0, "the old history still reads"
    assert by_id[2].delta_version is not None, "batch 2 was published after the restore"
