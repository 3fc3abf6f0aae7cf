"""The sink's commit protocol against a real Delta table (delta-rs), without a JVM.

The checkpoint directory is written by hand the way Spark writes it (``metadata``, ``commits/N``),
so each protocol rule can be exercised at the exact point it is about.
"""

from __future__ import annotations

import json
import multiprocessing
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Schema

from harness.servers.s3 import S3Server
from spark_ckpt.errors import FencedError, PublishError, RestoreError
from spark_ckpt.sinks.hooks import restore_to_checkpoint
from spark_ckpt.sinks.manifest import Manifest, ManifestStore
from spark_ckpt.sinks.publisher import clean_orphans, precommit, publish_completed
from spark_ckpt.sinks.staging import StagingWriter
from spark_ckpt.sinks.table import commit_manifest
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.state.restore import restore_point
from spark_ckpt.state.storage import Location, StorageOptions

QUERY = "6a1f8f9e-0000-4000-8000-000000000001"
RUN = "11111111-0000-4000-8000-000000000001"
SCHEMA = pa.schema([("id", pa.int64()), ("txn", pa.string())])


class Harness:
    """A checkpoint location and a table, with helpers to play Spark's part.

    Both live on a local disk or on the S3 server (the same protocol code runs on both).
    """

    def __init__(self, root: str, options: StorageOptions) -> None:
        self.options = options
        self.ckpt = Location(f"{root}/ckpt", options)
        self.table = Location(f"{root}/table", options)
        self.ckpt.child("metadata").write_bytes(json.dumps({"id": QUERY}).encode() + b"\n")
        self.checkpoint = SparkCheckpoint(self.ckpt)
        self.store = ManifestStore(self.checkpoint)

    def stage(self, batch_id: int, ids: list[int], attempt: str = RUN) -> Manifest:
        writer = StagingWriter(
            self.table, [], 1 << 30, QUERY, batch_id, 0, self.store.intents_dir(batch_id, attempt)
        )
        batch = pa.record_batch(
            [pa.array(ids, pa.int64()), pa.array([f"t{batch_id}"] * len(ids))], schema=SCHEMA
        )
        files = writer.write([batch])
        return Manifest(
            batch_id,
            QUERY,
            self.table.uri,
            Schema.from_arrow(SCHEMA).to_json(),
            (),
            tuple(files),
            attempt,
        )

    def complete(self, batch_id: int) -> None:
        self.ckpt.child("commits", str(batch_id)).write_bytes(b"v1\n{}\n")

    def delta(self) -> DeltaTable:
        return DeltaTable(self.table.url, storage_options=self.table.delta_options())

    def rows(self) -> list[int]:
        return sorted(self.delta().to_pyarrow_table().column("id").to_pylist())

    def versions(self) -> int:
        return len(self.delta().history())

    def exists(self, rel: str) -> bool:
        return self.table.child(rel).exists()

    def parquet_files(self) -> set[str]:
        return {e.name for e in self.table.list(recursive=True) if e.name.endswith(".parquet")}

    def live_files(self) -> set[str]:
        actions = pa.table(self.delta().get_add_actions(flatten=True))
        return {str(p) for p in actions.column("path").to_pylist()}


@pytest.fixture(params=["local", "s3"])
def harness(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Harness:
    if request.param == "local":
        return Harness(str(tmp_path_factory.mktemp("pub")), StorageOptions())
    server: S3Server = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return Harness(f"s3://{bucket}/{uuid.uuid4().hex[:8]}", StorageOptions.of(server.options()))


def test_manifest_alone_publishes_nothing(harness: Harness) -> None:
    """Before commits/N exists, batch N is not visible, not even as a table."""
    precommit(harness.store, harness.stage(0, [1, 2]))
    assert publish_completed(harness.store, harness.table) == []
    assert not harness.table.child("_delta_log").list()


def test_completed_batch_is_one_commit_with_its_txn(harness: Harness) -> None:
    """commits/N makes N publishable: one Delta commit, txn version N."""
    precommit(harness.store, harness.stage(0, [1, 2]))
    harness.complete(0)
    assert publish_completed(harness.store, harness.table) == [0]
    assert harness.rows() == [1, 2]
    assert harness.delta().transaction_version(QUERY) == 0
    assert harness.versions() == 1


def test_a_created_table_checkpoints_every_ten_commits(harness: Harness) -> None:
    """Every publisher loads the log since the last checkpoint; ten commits bound that read."""
    for batch in range(11):
        precommit(harness.store, harness.stage(batch, [batch]))
        harness.complete(batch)
    assert publish_completed(harness.store, harness.table) == list(range(11))
    assert harness.delta().metadata().configuration["delta.checkpointInterval"] == "10"
    checkpoints = [
        e.name for e in harness.table.child("_delta_log").list() if "checkpoint." in e.name
    ]
    assert checkpoints == [f"{9:020d}.checkpoint.parquet"], "delta-rs checkpoints after 10 commits"


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
    history = harness.delta().history()
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
    with pytest.raises(PublishError, match=r"cannot publish batch 1 .* no manifest"):
        publish_completed(harness.store, harness.table)
    assert harness.rows() == [0]


def test_failed_tasks_files_are_deleted_at_precommit(harness: Harness) -> None:
    """Files of a failed task (an intent, but not in the commit messages) go at pre-commit."""
    failed_task = harness.stage(0, [99])  # staged, never reported
    manifest = harness.stage(0, [1, 2])
    precommit(harness.store, manifest)
    assert not harness.exists(failed_task.files[0].path)
    assert harness.exists(manifest.files[0].path)
    harness.complete(0)
    publish_completed(harness.store, harness.table)
    assert harness.rows() == [1, 2]


def test_two_attempts_of_a_batch_publish_once_and_the_other_is_cleaned(harness: Harness) -> None:
    """Attempts never overwrite each other; the run's own manifest wins, the other is deleted."""
    other = harness.stage(0, [1, 2], attempt="22222222-0000-4000-8000-000000000002")
    precommit(harness.store, other)
    mine = harness.stage(0, [1, 2])
    precommit(harness.store, mine)
    assert {m.attempt for m in harness.store.manifests(0)} == {RUN, other.attempt}
    harness.complete(0)
    assert publish_completed(harness.store, harness.table, run=RUN) == [0]
    assert harness.rows() == [1, 2]
    assert harness.parquet_files() == {f.path for f in mine.files}, "the other attempt's files"


def test_recovery_publishes_the_newest_runs_manifest(harness: Harness) -> None:
    """A publisher acting for no run (recovery at start) sides with the newest run."""
    older = "00000000-0000-4000-8000-000000000000"
    harness.ckpt.child("delta_2pc", "runs", f"{1:015d}-{older}").write_bytes(b"")
    harness.ckpt.child("delta_2pc", "runs", f"{2:015d}-{RUN}").write_bytes(b"")
    stale = harness.stage(0, [1], attempt=older)  # sorts first by name
    precommit(harness.store, stale)
    newest = harness.stage(0, [1])
    precommit(harness.store, newest)
    harness.complete(0)
    assert publish_completed(harness.store, harness.table) == [0]
    assert harness.parquet_files() == {f.path for f in newest.files}


def test_vanished_staged_file_is_refused(harness: Harness) -> None:
    """A staged file deleted behind the sink's back stops publishing with a clear error."""
    manifest = harness.stage(0, [1])
    precommit(harness.store, manifest)
    harness.table.child(manifest.files[0].path).delete()
    harness.complete(0)
    with pytest.raises(PublishError, match="staged files are gone"):
        publish_completed(harness.store, harness.table)


def test_a_stale_run_is_fenced_off(harness: Harness) -> None:
    """Once a newer run registered, the older run's publisher refuses to commit."""
    harness.store.register_run(RUN)
    precommit(harness.store, harness.stage(0, [1]))
    harness.complete(0)
    newer = "33333333-0000-4000-8000-000000000003"
    harness.ckpt.child("delta_2pc", "runs", f"{9 * 10**14:015d}-{newer}").write_bytes(b"")
    with pytest.raises(FencedError, match=f"run {newer} started later"):
        publish_completed(harness.store, harness.table, run=RUN)
    assert not harness.table.child("_delta_log").list()
    assert publish_completed(harness.store, harness.table, run=newer) == [0]


def _publish_in_process(ckpt: str, table: str, options: dict[str, str]) -> None:
    storage = StorageOptions.of(options)
    publish_completed(
        ManifestStore(SparkCheckpoint(ckpt, storage)), Location(table, storage), run=RUN
    )


def test_concurrent_publishers_commit_each_batch_once(harness: Harness) -> None:
    """Several processes publishing at once, without a lock, still give one version per batch."""
    for batch_id in range(4):
        precommit(harness.store, harness.stage(batch_id, [batch_id]))
        harness.complete(batch_id)
    context = multiprocessing.get_context("spawn")
    args = (harness.ckpt.uri, harness.table.uri, harness.options.as_dict())
    workers = [context.Process(target=_publish_in_process, args=args) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    assert harness.rows() == [0, 1, 2, 3]
    assert harness.versions() == 4
    assert [h["spark-ckpt.batchId"] for h in reversed(harness.delta().history())] == [0, 1, 2, 3]


def test_orphans_of_batches_never_completed_go_after_the_grace_period(harness: Harness) -> None:
    """A batch Spark never completed loses its staged files once they are old enough.

    They are found by their intents; the published batch and other writers' files stay.
    """
    kept = harness.stage(0, [1])
    precommit(harness.store, kept)
    harness.complete(0)
    publish_completed(harness.store, harness.table)
    orphan = harness.stage(7, [7]).files[0]
    foreign = harness.table.child("part-00000-someone-else.snappy.parquet")
    foreign.write_bytes(b"not ours")
    assert clean_orphans(harness.store, harness.table, 3600) == []
    assert harness.exists(orphan.path)
    assert clean_orphans(harness.store, harness.table, 0) == [7]
    assert not harness.exists(orphan.path)
    assert foreign.exists()
    assert harness.rows() == [1]


def test_leftovers_of_a_crashed_publisher_are_tidied_at_start(harness: Harness) -> None:
    """A publisher that died before tidying up leaves files the next start deletes.

    They are another attempt's files, found through its manifest, not by listing the table.
    """
    other = harness.stage(0, [1], attempt="22222222-0000-4000-8000-000000000002")
    precommit(harness.store, other)
    mine = harness.stage(0, [1])
    harness.store.write(mine)  # the manifest, with this attempt's intents still there
    harness.complete(0)
    commit_manifest(harness.table, None, mine)  # published, then the publisher died
    assert clean_orphans(harness.store, harness.table, 3600) == [0]
    assert harness.parquet_files() == {f.path for f in mine.files}
    assert harness.store.staged_batches() == []


def test_empty_batches_are_published_as_empty_commits(harness: Harness) -> None:
    """A batch without rows still gets its Delta commit and txn version (first and later)."""
    for batch_id, ids in enumerate([[], [5], []]):
        precommit(harness.store, harness.stage(batch_id, ids))
        harness.complete(batch_id)
    assert publish_completed(harness.store, harness.table) == [0, 1, 2]
    assert harness.rows() == [5]
    assert harness.versions() == 3
    assert harness.delta().transaction_version(QUERY) == 2


def test_restore_publishes_up_to_the_checkpoint_and_discards_what_follows(
    harness: Harness,
) -> None:
    """FLINK-20396: restoring C publishes C (it completed) and drops staged work after C."""
    harness.store.record_table(harness.table.uri)
    for batch in range(3):
        precommit(harness.store, harness.stage(batch, [batch]))
    harness.complete(0)
    harness.complete(1)
    harness.stage(3, [3])  # staged, never pre-committed: only intents
    point = restore_point(harness.checkpoint)
    assert point.checkpoint_id == 1
    restore_to_checkpoint(point)
    assert harness.rows() == [0, 1]
    assert harness.store.batch_ids() == [0, 1]
    assert harness.store.staged_batches() == []
    assert harness.parquet_files() == harness.live_files(), "batch 2's and 3's files are gone"
    records = HistoryLog(harness.checkpoint).records()
    assert [(r.checkpoint_id, r.delta_version) for r in records] == [(0, 0), (1, 1)]


def test_restoring_behind_the_table_is_refused(harness: Harness) -> None:
    """A checkpoint location older than the table would publish batches twice: refuse."""
    harness.store.record_table(harness.table.uri)
    for batch in range(2):
        precommit(harness.store, harness.stage(batch, [batch]))
        harness.complete(batch)
    publish_completed(harness.store, harness.table)
    harness.ckpt.child("commits", "1").delete()  # the location rewound to checkpoint 0
    with pytest.raises(RestoreError, match="already holds its batches up to 1"):
        restore_to_checkpoint(restore_point(harness.checkpoint))
    assert harness.rows() == [0, 1]
    assert harness.store.batch_ids() == [0, 1], "nothing was discarded"


def test_restore_without_sink_state_does_nothing(tmp_path: Path) -> None:
    """A checkpoint location without delta-2pc state is left alone."""
    restore_to_checkpoint(restore_point(SparkCheckpoint(str(tmp_path / "elsewhere"))))
