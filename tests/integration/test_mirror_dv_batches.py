"""A mirror applied merge-on-read, batch after batch, read back by delta-spark and delta-rs.

Four files of 100 keys each, then batches of updates, deletes and inserts on keys spread over
them, published as the sink publishes (``plan_batch`` then ``apply_plan``). After every batch
delta-rs (and delta-spark after the last) must read exactly the model's rows, and the batch's
``commitInfo`` must show an
apply whose cost follows the changes: it read the files whose key statistics can hold a changed
key and no other, marked rows in the files holding them, and wrote one new file. The log passes
a checkpoint (every 10 versions) on the way.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from harness.delta_reads import read_delta
from spark_ckpt.sinks.mirror.dv_commit import has_deletion_vectors
from spark_ckpt.sinks.mirror.precommit import plan_batch
from spark_ckpt.sinks.mirror.publish import apply_plan
from spark_ckpt.sinks.staging import staged_name, write_staged_file
from spark_ckpt.sources.schema import ARROW_SCHEMA
from spark_ckpt.state.storage import Location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

TABLE = "s.t"


class Source:
    """The source table as a model, its mirror, and where each key's stored version is."""

    def __init__(self, root: Path) -> None:
        self.root = Location(str(root))
        self.changelog = self.root.child("_changes")
        self.query_id = str(uuid.uuid4())
        self.batch = 0
        self.rows: dict[int, str] = {}
        # Key statistics of each live file: (min, max) of the keys written to it.
        self.ranges: list[tuple[int, int]] = []

    def publish(self, changes: list[tuple[str, int, str | None]]) -> dict[str, int]:
        """Apply ``(op, id, v)`` changes as one batch; its ``commitInfo`` counts."""
        columns: dict[str, list[Any]] = {f.name: [] for f in ARROW_SCHEMA}
        for index, (op, key, value) in enumerate(changes):
            image = json.dumps({"id": key, "v": value})
            row = {
                "source": "test",
                "txn_id": f"t{self.batch}",
                "txn_order": 1,
                "txn_size": len(changes),
                "event_index": index,
                "commit_ts": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
                "table": TABLE,
                "op": op,
                "key": json.dumps({"id": key}),
                "before": image if op == "d" else None,
                "after": None if op == "d" else image,
            }
            for name, item in row.items():
                columns[name].append(item)
        rows = pa.Table.from_pydict(columns, schema=ARROW_SCHEMA)
        name = staged_name(self.query_id, self.batch, 0)
        staged = write_staged_file(self.changelog, name, rows)
        plan = plan_batch(self.root, self.changelog, [staged], self.query_id, self.batch, "a")
        apply_plan(plan, self.root.options, self.query_id, self.batch)
        self.batch += 1
        (info,) = self.delta().history(1)
        names = ("filesRead", "filesMarked", "rowsMarked", "filesRewritten")
        return {n: int(info[f"spark-ckpt.mirror.{n}"]) for n in names}

    def delta(self) -> DeltaTable:
        return DeltaTable(str(self.uri))

    @property
    def uri(self) -> str:
        return f"{self.root.path}/{TABLE}"

    def expected(self, changes: list[tuple[str, int, str | None]]) -> dict[str, int]:
        """What the apply of ``changes`` must read and mark, from the model (before it)."""
        keys = {key for _, key, _ in changes}
        read = sum(any(low <= k <= high for k in keys) for low, high in self.ranges)
        changed = sorted(k for k in keys if k in self.rows)
        upserts = sorted(k for op, k, _ in changes if op != "d")
        for op, key, value in changes:
            if op == "d":
                self.rows.pop(key, None)
            else:
                self.rows[key] = str(value)
        if upserts:
            self.ranges.append((upserts[0], upserts[-1]))
        return {"filesRead": read, "rowsMarked": len(changed)}


def spark_rows(spark: SparkSession, uri: str) -> dict[int, str]:
    return {r.id: r.v for r in spark.read.format("delta").load(uri).collect()}


def test_batches_by_deletion_vector_read_exactly_the_source_in_both_engines_at_their_cost(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Every batch: only its candidate files read, one file written; both engines agree."""
    source = Source(tmp_path / "root")
    for first in range(0, 400, 100):
        load = [("c", key, "a") for key in range(first, first + 100)]
        source.expected(load)
        source.publish(load)
    assert has_deletion_vectors(source.delta())
    rng = random.Random(43)
    for batch in range(7):
        # Keys of two of the four first files, so the others' statistics rule them out
        # (until new files' ranges cover them), and a new key past the end.
        hundreds = rng.sample(range(4), 2)
        keys = sorted({h * 100 + rng.randrange(100) for h in hundreds for _ in range(6)})
        changes: list[tuple[str, int, str | None]] = [
            ("d" if i % 3 == 0 else "u", key, f"b{batch}") for i, key in enumerate(keys)
        ]
        changes.append(("c", 1000 + batch, "new"))
        files_before = set(source.delta().file_uris())
        want = source.expected(changes)
        got = source.publish(changes)
        assert got["filesRead"] == want["filesRead"], f"batch {batch}: {got}, want {want}"
        assert got["rowsMarked"] == want["rowsMarked"], f"batch {batch}: {got}"
        assert got["filesRewritten"] == 0
        files_after = set(source.delta().file_uris())
        assert files_before < files_after, "no file is rewritten or removed"
        assert len(files_after - files_before) == 1, "the batch's new versions: one file"
        stored = read_delta(source.uri).to_pylist()
        assert {r["id"]: r["v"] for r in stored} == source.rows, f"delta-rs after batch {batch}"
    log = Path(source.uri) / "_delta_log"
    assert list(log.glob("*.checkpoint.parquet")), "the batches crossed a checkpoint"
    assert spark_rows(spark, source.uri) == source.rows, "delta-spark after the last batch"
