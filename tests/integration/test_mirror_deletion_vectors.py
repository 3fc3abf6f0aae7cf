"""Deletion vectors written and committed by spark-ckpt, read back by delta-spark and delta-rs.

A table of 300 rows in two files (written by delta-rs) gets the ``deletionVectors`` feature, then
two batches: the first deletes rows of both files (two DVs in one DV file) and adds files with
new versions of some, the second deletes more rows of one file (its DV merged with the first).
Both engines must read exactly the rows left, at every step and after a checkpoint, and the
table's ``txn`` must say which batch it holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from spark_ckpt.sinks.mirror.deletion_vectors import DeletedRows
from spark_ckpt.sinks.mirror.dv_commit import (
    DeletionCommit,
    commit_deletions,
    enable_deletion_vectors,
    log_files,
)
from spark_ckpt.sinks.staging import write_staged_file
from spark_ckpt.state.storage import Location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

QUERY = "5b0e7c1e-8f43-4c7e-9d53-0a4c2b9e6f11"


def rows(ids: range, version: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [version] * len(ids)})


def read_by_spark(spark: SparkSession, uri: str) -> list[tuple[int, str]]:
    return sorted((r.id, r.v) for r in spark.read.format("delta").load(uri).collect())


def read_by_delta_rs(uri: str) -> list[tuple[int, str]]:
    query = QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT id, v FROM t")
    table = pa.table(query.read_all())
    return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def test_both_engines_read_exactly_the_rows_deletion_vectors_leave(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Rows in a DV are gone for delta-spark and delta-rs; merged DVs keep both batches' rows."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, rows(range(0, 150), "a"))
    write_deltalake(uri, rows(range(150, 300), "a"), mode="append")
    enable_deletion_vectors(DeltaTable(uri))
    delta = DeltaTable(uri)
    # The file of ids 0..149 and the file of 150..299: each id at row position id - first id.
    first, second = (
        f["path"]
        for f in sorted(
            pa.table(delta.get_add_actions(flatten=True)).to_pylist(), key=lambda f: f["min.id"]
        )
    )
    table = Location(uri)

    # Batch 1: ids 5 and 10..19 get a new version "b" in new files, ids 0 and 150..154 are
    # deleted: one DV file holds both files' DVs (the second at an offset past the first).
    new = write_staged_file(table, "part-batch-1.parquet", rows(range(10, 20), "b"))
    five = write_staged_file(table, "part-batch-1b.parquet", rows(range(5, 6), "b"))
    changed = [0, 5, *range(10, 20), *range(150, 155)]
    deletions = {
        first: DeletedRows.from_indexes(changed[:-5]),
        second: DeletedRows.from_indexes(range(5)),
    }
    version = commit_deletions(table, delta, DeletionCommit(QUERY, 1, deletions, [new, five]))
    expected = sorted(
        [(i, "a") for i in range(300) if i not in changed] + [(i, "b") for i in [5, *range(10, 20)]]
    )
    dvs = [f.deletion_vector for f in log_files(table, version, deletions).values()]
    assert len({dv.offset for dv in dvs if dv is not None}) == 2
    assert read_by_spark(spark, uri) == expected
    assert read_by_delta_rs(uri) == expected

    # Batch 2: ids 5 (again: already deleted) and 100..119 of the same file are deleted.
    delta = DeltaTable(uri)
    version = commit_deletions(
        table,
        delta,
        DeletionCommit(QUERY, 2, {first: DeletedRows.from_indexes([5, *range(100, 120)])}),
    )
    expected = [(i, v) for i, v in expected if not 100 <= i < 120]
    assert read_by_spark(spark, uri) == expected
    assert read_by_delta_rs(uri) == expected
    merged = log_files(table, version, [first])[first].deletion_vector
    assert merged is not None
    assert merged.cardinality == len(changed) - 5 + 20
    assert DeltaTable(uri).transaction_version(QUERY) == 2

    # A checkpoint (delta-rs's) keeps the DV: both engines and the log replay read through it.
    DeltaTable(uri).create_checkpoint()
    assert read_by_spark(spark, uri) == expected
    assert read_by_delta_rs(uri) == expected
    assert log_files(table, version, [first])[first].deletion_vector == merged
