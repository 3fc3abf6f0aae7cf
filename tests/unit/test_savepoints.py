"""Savepoints on a made checkpoint location and real Delta tables (delta-rs; no JVM).

The checkpoint location is laid out as Spark and spark-ckpt lay it out (the integration tests
take savepoints of real queries); the sink's batches are pre-committed and published through the
real publisher, so the tables' ``txn`` versions are the ones a query leaves.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Schema

from spark_ckpt.errors import SavepointError, SavepointRestoreError
from spark_ckpt.model.events import CompletedEvent, StartEvent
from spark_ckpt.sinks.manifest import Manifest, ManifestStore
from spark_ckpt.sinks.publisher import precommit, publish_completed
from spark_ckpt.sinks.savepoint import DeltaSinkSavepoints
from spark_ckpt.sinks.staging import StagedFile
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.state.restore import restore_point
from spark_ckpt.state.savepoints import (
    DESCRIPTOR,
    Savepoint,
    create_savepoint,
    list_savepoints,
    map_path,
    restore_savepoint,
)
from spark_ckpt.state.storage import Location

QUERY = "0c5e3c1a-5a1e-4f00-8000-00000000beef"
SCHEMA = pa.schema([("id", pa.int64())])
PARTICIPANTS = {"delta-2pc": DeltaSinkSavepoints()}


class Query:
    """A query's checkpoint location and table, advanced batch by batch as Spark would."""

    def __init__(self, ckpt: Path, table: Path) -> None:
        self.root = Location(str(ckpt))
        self.table = Location(str(table))
        self.checkpoint = SparkCheckpoint(self.root)
        self.store = ManifestStore(self.checkpoint)
        if not self.root.child("metadata").exists():
            self.root.child("metadata").write_bytes(json.dumps({"id": QUERY}).encode() + b"\n")
            self.root.child("sources", "0", "0").write_bytes(b"v1\n{}\n")
            self.root.child("state", "0", "_metadata", "metadata").write_bytes(b"{}")
        self.store.record_table(self.table.url)

    def stage(self, batch: int) -> None:
        """Spark logs offsets/N and the sink pre-commits N (staged rows: N*10 .. N*10+2)."""
        self.root.child("offsets", str(batch)).write_bytes(
            b'v1\n{"batchWatermarkMs":0}\n' + json.dumps({"emitted": batch}).encode() + b"\n"
        )
        self.root.child("offsets", f".{batch}.crc").write_bytes(b"crc")
        self.root.child("state", "0", "0", f"{batch + 1}.delta").write_bytes(b"state")
        self.root.child("spark_ckpt", "hooks", f"{batch}.json").write_bytes(b"{}")
        name = f"part-{batch:05d}.parquet"
        pq.write_table(
            pa.table({"id": [batch * 10 + i for i in range(3)]}), f"{self.table.path}/{name}"
        )
        size = self.table.child(name).info().size
        staged = StagedFile(name, size, 3, {}, "{}", 1_700_000_000_000)
        schema = Schema.from_arrow(SCHEMA).to_json()
        precommit(self.store, Manifest(batch, QUERY, self.table.url, schema, (), (staged,), "r1"))

    def complete(self, batch: int) -> None:
        """Spark writes commits/N; the history records it."""
        self.root.child("commits", str(batch)).write_bytes(b"v1\n{}\n")
        HistoryLog(self.checkpoint).append(CompletedEvent(batch, None, 100, 3))

    def publish(self, upto: int) -> None:
        publish_completed(self.store, self.table, upto=upto)


def ids(table: Location) -> list[int]:
    return sorted(DeltaTable(table.url).to_pyarrow_table()["id"].to_pylist())


@pytest.fixture
def query(tmp_path: Path) -> Query:
    """Batches 0-2 complete and published, batch 3 staged (in flight)."""
    (tmp_path / "table").mkdir()
    q = Query(tmp_path / "ckpt", tmp_path / "table")
    HistoryLog(q.checkpoint).append(StartEvent(1, None))
    for batch in range(3):
        q.stage(batch)
        q.complete(batch)
        q.publish(batch)
    q.stage(3)
    return q


def test_a_savepoint_holds_exactly_what_its_batch_needs(query: Query, tmp_path: Path) -> None:
    savepoint = create_savepoint(
        query.checkpoint,
        Location(str(tmp_path / "sp")),
        query_name="orders",
        participants=PARTICIPANTS,
    )
    assert savepoint.checkpoint_id == 2
    assert savepoint.savepoint_id.startswith("savepoint-0c5e3c-2-")
    paths = {f.path for f in savepoint.files}
    assert {"metadata", "sources/0/0", "state/0/_metadata/metadata"} <= paths
    assert {p for p in paths if p.startswith(("offsets/", "commits/"))} == {
        f"{kind}/{n}" for kind in ("offsets", "commits") for n in range(3)
    }, "batch 3 is in flight: not in the savepoint; no checksum files"
    assert {p for p in paths if p.startswith("state/0/0/")} == {
        f"state/0/0/{v}.delta" for v in (1, 2, 3)
    }, "state versions up to N + 1"
    assert {p for p in paths if p.startswith("spark_ckpt/hooks/")} == {
        f"spark_ckpt/hooks/{n}.json" for n in range(3)
    }
    assert [p for p in paths if p.startswith("delta_2pc/")] == ["delta_2pc/sink.json"]
    described = json.loads(savepoint.root.child(DESCRIPTOR).read_bytes() or b"")
    assert (described["format"], described["version"]) == ("spark-ckpt-savepoint", 1)
    assert described["components"]["delta-2pc"] == {"table": query.table.url, "published": 2}
    assert described["deltaVersion"] == 2
    assert described["sourceOffsets"] == ['{"emitted": 2}']
    assert described["queryName"] == "orders"
    saved = SparkCheckpoint(savepoint.root.child("checkpoint"))
    assert [r.checkpoint_id for r in HistoryLog(saved).records()] == [0, 1, 2]
    created = [r for r in HistoryLog(query.checkpoint).records() if r.savepoints]
    assert [(r.checkpoint_id, r.savepoints[0]["action"]) for r in created] == [(2, "created")]


def test_a_savepoint_is_taken_at_the_newest_published_batch(query: Query, tmp_path: Path) -> None:
    query.complete(3)  # complete, not yet published
    savepoint = create_savepoint(
        query.checkpoint, Location(str(tmp_path / "sp")), participants=PARTICIPANTS
    )
    assert savepoint.checkpoint_id == 2


def test_restore_continues_exactly_after_the_savepoint(query: Query, tmp_path: Path) -> None:
    savepoint = create_savepoint(
        query.checkpoint, Location(str(tmp_path / "sp")), participants=PARTICIPANTS
    )
    target = SparkCheckpoint(str(tmp_path / "ckpt2"))
    assert restore_savepoint(savepoint, target, participants=PARTICIPANTS)
    point = restore_point(target)
    assert (point.checkpoint_id, point.rerun_batch) == (2, None)
    assert target.query_id() == QUERY
    restored = Query(tmp_path / "ckpt2", tmp_path / "table")
    restored.stage(3)
    restored.complete(3)
    restored.publish(3)
    assert ids(query.table) == [b * 10 + i for b in range(4) for i in range(3)]
    assert not restore_savepoint(savepoint, target, participants=PARTICIPANTS), "idempotent"


def test_restore_into_a_table_that_moved_past_the_savepoint_is_refused(
    query: Query, tmp_path: Path
) -> None:
    older = create_savepoint(
        query.checkpoint, Location(str(tmp_path / "sp")), participants=PARTICIPANTS
    )
    query.complete(3)
    query.publish(3)
    target = SparkCheckpoint(str(tmp_path / "ckpt2"))
    with pytest.raises(SavepointRestoreError) as info:
        restore_savepoint(older, target, participants=PARTICIPANTS)
    message = str(info.value)
    assert "already holds the query's batches up to 3" in message
    assert "restore into a new table" in message
    assert "a savepoint taken at batch 3 or later" in message
    assert not target.root.list(), "nothing restored"


def test_restore_with_a_path_mapping_forks_into_a_new_table(query: Query, tmp_path: Path) -> None:
    savepoint = create_savepoint(
        query.checkpoint, Location(str(tmp_path / "sp")), participants=PARTICIPANTS
    )
    query.complete(3)
    query.publish(3)  # the original table moved on: fine for a new table
    (tmp_path / "fork").mkdir()
    mapping = {str(tmp_path / "table"): str(tmp_path / "fork")}
    target = SparkCheckpoint(str(tmp_path / "ckpt2"))
    assert restore_savepoint(savepoint, target, mapping, participants=PARTICIPANTS)
    assert ManifestStore(target).table() == str(tmp_path / "fork")
    fork = Query(tmp_path / "ckpt2", tmp_path / "fork")
    fork.stage(3)
    fork.complete(3)
    fork.publish(3)
    assert ids(fork.table) == [30, 31, 32], "the fork holds what came after the savepoint"


def test_a_relocated_table_copy_restores_through_the_mapping(query: Query, tmp_path: Path) -> None:
    savepoint = create_savepoint(
        query.checkpoint, Location(str(tmp_path / "sp")), participants=PARTICIPANTS
    )
    shutil.copytree(tmp_path / "table", tmp_path / "moved")
    moved_savepoint = tmp_path / "elsewhere" / "sp"
    shutil.move(savepoint.root.path, moved_savepoint)  # savepoints are relocatable
    loaded = Savepoint.load(str(moved_savepoint))
    target = SparkCheckpoint(str(tmp_path / "ckpt2"))
    restore_savepoint(
        loaded,
        target,
        {str(tmp_path / "table"): str(tmp_path / "moved")},
        participants=PARTICIPANTS,
    )
    moved = Query(tmp_path / "ckpt2", tmp_path / "moved")
    moved.stage(3)
    moved.complete(3)
    moved.publish(3)
    assert ids(moved.table) == [b * 10 + i for b in range(4) for i in range(3)]


def test_restore_into_a_used_location_is_refused(query: Query, tmp_path: Path) -> None:
    savepoint = create_savepoint(
        query.checkpoint, Location(str(tmp_path / "sp")), participants=PARTICIPANTS
    )
    with pytest.raises(SavepointRestoreError, match="is not empty"):
        restore_savepoint(savepoint, query.checkpoint, participants=PARTICIPANTS)


def test_damaged_incomplete_and_newer_savepoints_are_refused(query: Query, tmp_path: Path) -> None:
    savepoint = create_savepoint(
        query.checkpoint, Location(str(tmp_path / "sp")), participants=PARTICIPANTS
    )
    damaged = savepoint.root.child("checkpoint", "offsets", "2")
    damaged.write_bytes(b"v1\n")
    with pytest.raises(SavepointError, match=r"damaged: offsets/2 should have \d+ bytes"):
        restore_savepoint(
            savepoint, SparkCheckpoint(str(tmp_path / "c2")), participants=PARTICIPANTS
        )
    descriptor = savepoint.root.child(DESCRIPTOR)
    body = json.loads(descriptor.read_bytes() or b"")
    descriptor.write_bytes(json.dumps({**body, "version": 99}).encode())
    with pytest.raises(SavepointError, match="upgrade spark-ckpt"):
        Savepoint.load(savepoint.location)
    descriptor.delete()
    with pytest.raises(SavepointError, match="incomplete"):
        Savepoint.load(savepoint.location)
    assert list_savepoints(Location(str(tmp_path / "sp"))) == []


def test_no_savepoint_before_a_published_batch(tmp_path: Path) -> None:
    (tmp_path / "table").mkdir()
    q = Query(tmp_path / "ckpt", tmp_path / "table")
    with pytest.raises(SavepointError, match=r"no checkpoint .* is complete yet"):
        create_savepoint(q.checkpoint, Location(str(tmp_path / "sp")), participants=PARTICIPANTS)
    q.stage(0)
    q.complete(0)
    with pytest.raises(SavepointError, match="has published nothing yet"):
        create_savepoint(q.checkpoint, Location(str(tmp_path / "sp")), participants=PARTICIPANTS)


def test_path_mapping_matches_whole_components_and_the_longest_prefix() -> None:
    mapping = {"s3://b/lake": "s3://c/lake2", "s3://b/lake/orders": "/local/orders"}
    assert map_path("s3a://b/lake/items", mapping) == "s3://c/lake2/items"
    assert map_path("s3://b/lake/orders", mapping) == "/local/orders"
    assert map_path("s3://b/lakehouse/x", mapping) == "s3://b/lakehouse/x"
    assert map_path("/other", mapping) == "/other"


SCRIPT = Path(sys.executable).with_name("spark-ckpt")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_cli_creates_lists_inspects_and_restores(query: Query, tmp_path: Path) -> None:
    created = cli("savepoint", "create", query.root.url, str(tmp_path / "sp"), "--json")
    assert created.returncode == 0, created.stderr
    location = json.loads(created.stdout)["location"]
    listed = cli("savepoint", "list", str(tmp_path / "sp"), "--json")
    assert listed.returncode == 0, listed.stderr
    [summary] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (summary["location"], summary["checkpoint"]) == (location, 2)
    shown = cli("savepoint", "inspect", location)
    assert shown.returncode == 0, shown.stderr
    assert "batch         2 (a restored query continues with the next)" in shown.stdout
    assert f"delta-2pc     {query.table.url} up to batch 2 (Delta version 2)" in shown.stdout
    query.complete(3)
    query.publish(3)
    refused = cli("savepoint", "restore", location, str(tmp_path / "ckpt2"))
    assert refused.returncode == 1
    assert refused.stderr.startswith("spark-ckpt: error: cannot restore the savepoint")
    assert len(refused.stderr.splitlines()) == 1
    (tmp_path / "fork").mkdir()
    mapped = f"--map={tmp_path / 'table'}={tmp_path / 'fork'}"
    restored = cli("savepoint", "restore", location, str(tmp_path / "ckpt2"), mapped)
    assert restored.returncode == 0, restored.stderr
    assert "it continues with batch 3" in restored.stdout
    history = cli("history", str(tmp_path / "ckpt2"))
    assert f"savepoint restored: {location}" in history.stdout
    missing = cli("savepoint", "inspect", str(tmp_path / "nowhere"))
    assert (missing.returncode, "no savepoint at" in missing.stderr) == (1, True)
