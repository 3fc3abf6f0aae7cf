"""The sink's commit protocol against a real Delta table (delta-rs), without a JVM.

The checkpoint directory is written by hand the way Spark writes it (``metadata``, ``commits/N``),
so each protocol rule can be exercised at the exact point it is about.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Schema

from spark_ckpt.errors import PublishError, RestoreError
from spark_ckpt.sinks.hooks import restore_to_checkpoint
from spark_ckpt.sinks.manifest import Manifest, ManifestStore
from spark_ckpt.sinks.publisher import clean_orphans, precommit, publish_completed
from spark_ckpt.sinks.staging import StagingWriter
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.state.restore import restore_point

QUERY = "6a1f8f9e-0000-4000-8000-000000000001"
SCHEMA = pa.schema([("id", pa.int64()), ("txn", pa.string())])


class Harness:
    """A checkpoint location and a table, with helpers to play Spark's part."""

    def __init__(self, root: Path) -> None:
        self.ckpt = root / "ckpt"
        self.table = str(root / "table")
        (self.ckpt / "commits").mkdir(parents=True)
        (self.ckpt / "metadata").write_text(json.dumps({"id": QUERY}) + "\n")
        self.store = ManifestStore(SparkCheckpoint(str(self.ckpt)))

    def stage(self, batch_id: int, ids: list[int]) -> Manifest:
        writer = StagingWriter(
            self.table, [], 1 << 30, QUERY, batch_id, 0, self.store.intents_dir(batch_id)
        )
        batch = pa.record_batch(
            [pa.array(ids, pa.int64()), pa.array([f"t{batch_id}"] * len(ids))], schema=SCHEMA
        )
        files = writer.write([batch])
        return Manifest(
            batch_id, QUERY, self.table, Schema.from_arrow(SCHEMA).to_json(), (), tuple(files)
        )

    def complete(self, batch_id: int) -> None:
        (self.ckpt / "commits" / str(batch_id)).write_text("v1\n{}\n")

    def rows(self) -> list[int]:
        return sorted(DeltaTable(self.table).to_pyarrow_table().column("id").to_pylist())

    def versions(self) -> int:
        return len(DeltaTable(self.table).history())


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def test_manifest_alone_publishes_nothing(harness: Harness) -> None:
    """Before commits/N exists, batch N is not visible, not even as a table."""
    precommit(harness.store, harness.stage(0, [1, 2]))
    assert publish_completed(harness.store, harness.table) == []
    assert not os.path.exists(os.path.join(harness.table, "_delta_log"))


def test_completed_batch_is_one_commit_with_its_txn(harness: Harness) -> None:
    """commits/N makes N publishable: one Delta commit, txn version N."""
    precommit(harness.store, harness.stage(0, [1, 2]))
    harness.complete(0)
    assert publish_completed(harness.store, harness.table) == [0]
    assert harness.rows() == [1, 2]
    assert DeltaTable(harness.table).transaction_version(QUERY) == 0
    assert harness.versions() == 1


def test_publishing_again_is_a_no_op(harness: Harness) -> None:
    """A second publisher finds the txn version and commits nothing."""
    precommit(harness.store, harness.stage(0, [1]))
    harness.complete(0)
    publish_completed(harness.store, harness.table)
    assert publish_completed(harness.store, harness.table) == []
    assert harness.versions() == 1


def test_batches_publish_in_order_and_never_skip(harness: Harness) -> None:
    """With commits/2 but not commits/1, neither 1 nor 2 is published."""
    for batch_id in range(3):
        precommit(harness.store, harness.stage(batch_id, [batch_id]))
    harness.complete(0)
    harness.complete(2)
    assert publish_completed(harness.store, harness.table) == [0]
    harness.complete(1)
    assert publish_completed(harness.store, harness.table) == [1, 2]
    history = DeltaTable(harness.table).history()
    assert [h["spark-ckpt.batchId"] for h in reversed(history)] == [0, 1, 2]


def test_upto_bounds_what_is_published(harness: Harness) -> None:
    """The next batch's commit publishes only up to N-1."""
    for batch_id in range(2):
        precommit(harness.store, harness.stage(batch_id, [batch_id]))
        harness.complete(batch_id)
    assert publish_completed(harness.store, harness.table, upto=0) == [0]
    assert publish_completed(harness.store, harness.table, upto=1) == [1]


def test_missing_manifest_in_the_middle_is_an_error(harness: Harness) -> None:
    """A gap between the table's version and the next manifest is refused, not skipped."""
    precommit(harness.store, harness.stage(0, [0]))
    harness.complete(0)
    publish_completed(harness.store, harness.table)
    precommit(harness.store, harness.stage(2, [2]))
    harness.complete(1)
    harness.complete(2)
    with pytest.raises(PublishError, match="batch 1 has no manifest"):
        publish_completed(harness.store, harness.table)
    assert harness.rows() == [0]


def test_rerun_discards_the_aborted_attempts_files(harness: Harness) -> None:
    """A re-run of N replaces N's manifest and deletes the earlier attempt's staged files."""
    first = harness.stage(0, [1, 2])
    precommit(harness.store, first)
    orphan_of_failed_task = harness.stage(0, [99])  # staged, never reported
    second = harness.stage(0, [1, 2])
    precommit(harness.store, second)
    for file in first.files + orphan_of_failed_task.files:
        assert not os.path.exists(os.path.join(harness.table, file.path))
    harness.complete(0)
    publish_completed(harness.store, harness.table)
    assert harness.rows() == [1, 2]


def test_vanished_staged_file_is_refused(harness: Harness) -> None:
    """A staged file deleted behind the sink's back stops publishing with a clear error."""
    manifest = harness.stage(0, [1])
    precommit(harness.store, manifest)
    os.unlink(os.path.join(harness.table, manifest.files[0].path))
    harness.complete(0)
    with pytest.raises(PublishError, match="staged files are gone"):
        publish_completed(harness.store, harness.table)


def _publish_in_process(ckpt: str, table: str) -> None:
    publish_completed(ManifestStore(SparkCheckpoint(ckpt)), table)


def test_concurrent_publishers_commit_each_batch_once(harness: Harness) -> None:
    """Several processes publishing at once still give one Delta version per batch."""
    for batch_id in range(4):
        precommit(harness.store, harness.stage(batch_id, [batch_id]))
        harness.complete(batch_id)
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_publish_in_process, args=(str(harness.ckpt), harness.table))
        for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    assert harness.rows() == [0, 1, 2, 3]
    assert harness.versions() == 4


def test_orphans_are_removed_only_after_the_grace_period(harness: Harness) -> None:
    """Unreferenced staged files of this query go; referenced ones and young ones stay."""
    kept = harness.stage(0, [1])
    precommit(harness.store, kept)
    harness.complete(0)
    publish_completed(harness.store, harness.table)
    orphan = harness.stage(7, [7]).files[0]
    foreign = Path(harness.table) / "part-00000-someone-else.snappy.parquet"
    foreign.write_bytes(b"not ours")
    assert clean_orphans(harness.store, harness.table, 3600) == []
    old = os.path.getmtime(os.path.join(harness.table, orphan.path)) - 7200
    os.utime(os.path.join(harness.table, orphan.path), (old, old))
    os.unlink(os.path.join(harness.store.root, "orphan-scan"))
    assert clean_orphans(harness.store, harness.table, 3600) == [orphan.path]
    assert foreign.exists()
    assert harness.rows() == [1]


def test_empty_batches_are_published_as_empty_commits(harness: Harness) -> None:
    """A batch without rows still gets its Delta commit and txn version (first and later)."""
    for batch_id, ids in enumerate([[], [5], []]):
        precommit(harness.store, harness.stage(batch_id, ids))
        harness.complete(batch_id)
    assert publish_completed(harness.store, harness.table) == [0, 1, 2]
    assert harness.rows() == [5]
    assert harness.versions() == 3
    assert DeltaTable(harness.table).transaction_version(QUERY) == 2


def _staged_files(table: str) -> set[str]:
    return {
        os.path.relpath(os.path.join(d, n), table)
        for d, _, names in os.walk(table)
        for n in names
        if n.endswith(".parquet")
    }


def test_restore_publishes_up_to_the_checkpoint_and_discards_what_follows(
    harness: Harness,
) -> None:
    """FLINK-20396: restoring C publishes C (it completed) and drops staged work after C."""
    harness.store.record_table(harness.table)
    for batch in range(3):
        precommit(harness.store, harness.stage(batch, [batch]))
    harness.complete(0)
    harness.complete(1)
    harness.stage(3, [3])  # staged, never pre-committed: only intents
    point = restore_point(SparkCheckpoint(str(harness.ckpt)))
    assert point.checkpoint_id == 1
    restore_to_checkpoint(point)
    assert harness.rows() == [0, 1]
    assert harness.store.batch_ids() == [0, 1]
    assert harness.store.staged_batches() == []
    live = {os.path.relpath(p, harness.table) for p in DeltaTable(harness.table).file_uris()}
    assert _staged_files(harness.table) == live, "batch 2's and 3's staged files are gone"
    records = HistoryLog(SparkCheckpoint(str(harness.ckpt))).records()
    assert [(r.checkpoint_id, r.delta_version) for r in records] == [(0, 0), (1, 1)]


def test_restoring_behind_the_table_is_refused(harness: Harness) -> None:
    """A checkpoint location older than the table would publish batches twice: refuse."""
    harness.store.record_table(harness.table)
    for batch in range(2):
        precommit(harness.store, harness.stage(batch, [batch]))
        harness.complete(batch)
    publish_completed(harness.store, harness.table)
    os.unlink(harness.ckpt / "commits" / "1")  # the location rewound to checkpoint 0
    with pytest.raises(RestoreError, match="already holds its batches up to 1"):
        restore_to_checkpoint(restore_point(SparkCheckpoint(str(harness.ckpt))))
    assert harness.rows() == [0, 1]
    assert harness.store.batch_ids() == [0, 1], "nothing was discarded"


def test_restore_without_sink_state_does_nothing(tmp_path: Path) -> None:
    restore_to_checkpoint(restore_point(SparkCheckpoint(str(tmp_path / "elsewhere"))))
