"""Deletion-vector commits without a JVM: the rules around the log entry, on real delta-rs tables.

Reads go through delta-rs (``QueryBuilder``, which applies DVs); delta-spark's reading of the
same commits is tests/integration/test_mirror_deletion_vectors.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from deltalake.exceptions import CommitFailedError

from harness.servers.s3 import S3Server
from spark_ckpt.errors import TableIncompatibleError, UsageError
from spark_ckpt.sinks.mirror.deletion_vectors import DeletedRows
from spark_ckpt.sinks.mirror.dv_commit import (
    DeletionCommit,
    commit_deletions,
    create_table,
    enable_deletion_vectors,
    log_files,
)
from spark_ckpt.state.storage import Location, StorageOptions


def make_table(tmp_path: Path, *, enable: bool = True) -> tuple[Location, str]:
    """A 10-row table in one file (row position = id); returns it and the file's path."""
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array(range(10), pa.int64())}))
    if enable:
        enable_deletion_vectors(DeltaTable(uri))
    (path,) = DeltaTable(uri).file_uris()
    return Location(uri), path.rsplit("/", 1)[-1]


def ids(table: Location) -> list[int]:
    delta = DeltaTable(table.url, storage_options=table.delta_options())
    query = QueryBuilder().register("t", delta).execute("SELECT id FROM t")
    return sorted(pa.table(query.read_all()).column("id").to_pylist())


def delete(table: Location, path: str, rows: list[int], batch: int = 1) -> int:
    commit = DeletionCommit("q", batch, {path: DeletedRows.from_indexes(rows)})
    delta = DeltaTable(table.url, storage_options=table.delta_options())
    return commit_deletions(table, delta, commit)


def test_enabling_adds_only_the_feature_and_is_idempotent(tmp_path: Path) -> None:
    """Reader 3 / writer 7 with deletionVectors alone; a second call commits nothing."""
    table, _ = make_table(tmp_path)
    delta = DeltaTable(table.url)
    protocol = delta.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert protocol.reader_features == ["deletionVectors"]
    assert protocol.writer_features == ["deletionVectors"]
    enable_deletion_vectors(delta)
    assert DeltaTable(table.url).version() == delta.version()


def test_a_table_without_the_feature_is_refused_with_how_to_add_it(tmp_path: Path) -> None:
    """No DV is committed to a table whose readers may not know DVs."""
    table, path = make_table(tmp_path, enable=False)
    with pytest.raises(TableIncompatibleError, match="enable_deletion_vectors"):
        delete(table, path, [1])
    assert ids(table) == list(range(10))


def test_an_append_only_table_is_refused(tmp_path: Path) -> None:
    """A switched-on rule this writer cannot honour (delta.appendOnly) is named in the error."""
    table, path = make_table(tmp_path)
    DeltaTable(table.url).alter.set_table_properties({"delta.appendOnly": "true"})
    with pytest.raises(TableIncompatibleError, match=r"delta\.appendOnly"):
        delete(table, path, [1])


def test_a_lost_race_for_the_version_is_a_commit_failure(tmp_path: Path) -> None:
    """When version v + 1 exists already, the commit fails and the other entry is untouched."""
    table, path = make_table(tmp_path)
    delta = DeltaTable(table.url)
    taken = table.child("_delta_log", f"{delta.version() + 1:020d}.json")
    taken.write_bytes(b'{"commitInfo":{"operation":"other"}}\n')
    with pytest.raises(CommitFailedError, match="another writer"):
        commit_deletions(
            table, delta, DeletionCommit("q", 1, {path: DeletedRows.from_indexes([1])})
        )
    assert taken.read_bytes() == b'{"commitInfo":{"operation":"other"}}\n'


def test_a_row_past_the_files_end_is_a_usage_error(tmp_path: Path) -> None:
    """Row 10 of a 10-row file does not exist: nothing is committed."""
    table, path = make_table(tmp_path)
    with pytest.raises(UsageError, match="past its 10 rows"):
        delete(table, path, [10])
    assert ids(table) == list(range(10))


def test_a_file_that_is_not_live_is_a_commit_failure(tmp_path: Path) -> None:
    """A file another commit removed cannot get a DV: the caller re-reads and re-plans."""
    table, _ = make_table(tmp_path)
    with pytest.raises(CommitFailedError, match="not live"):
        delete(table, "part-gone.parquet", [1])


def test_deleting_every_row_removes_the_file(tmp_path: Path) -> None:
    """A DV that would cover the whole file becomes a remove without an add."""
    table, path = make_table(tmp_path)
    delete(table, path, [0, 1, 2])
    version = delete(table, path, list(range(3, 10)), batch=2)
    assert ids(table) == []
    assert log_files(table, version, [path]) == {}
    assert DeltaTable(table.url).transaction_version("q") == 2


def test_merged_deletions_keep_both_batches(tmp_path: Path) -> None:
    """The second batch's DV holds the first batch's rows too; the remove names the old DV."""
    table, path = make_table(tmp_path)
    first = delete(table, path, [1, 2])
    old = log_files(table, first, [path])[path].deletion_vector
    second = delete(table, path, [2, 7], batch=2)
    assert ids(table) == [0, 3, 4, 5, 6, 8, 9]
    new = log_files(table, second, [path])[path].deletion_vector
    assert old is not None
    assert new is not None
    assert (old.cardinality, new.cardinality) == (2, 3)
    entry = table.child("_delta_log", f"{second:020d}.json").read_bytes() or b""
    actions = [json.loads(line) for line in entry.splitlines()]
    (remove,) = [a["remove"] for a in actions if "remove" in a]
    (add,) = [a["add"] for a in actions if "add" in a]
    assert (remove["path"], remove["deletionVector"]) == (path, old.to_json())
    assert (add["path"], add["deletionVector"]) == (path, new.to_json())
    assert json.loads(add["stats"])["numRecords"] == 10


def test_the_log_replay_reads_through_a_checkpoint(tmp_path: Path) -> None:
    """After delta-rs checkpoints a DV commit, the file's add (DV included) is found the same."""
    table, path = make_table(tmp_path)
    version = delete(table, path, [4, 5])
    before = log_files(table, version, [path])
    DeltaTable(table.url).create_checkpoint()
    assert log_files(table, version, [path]) == before
    delete(table, path, [6], batch=2)
    assert ids(table) == [0, 1, 2, 3, 7, 8, 9]


def test_a_partitioned_files_dv_keeps_its_partition_values(tmp_path: Path) -> None:
    """The add with the DV repeats the file's partition values, from JSON and from a checkpoint."""
    uri = str(tmp_path / "p")
    data = pa.table({"id": pa.array(range(6), pa.int64()), "day": ["a", "a", "a", "b", "b", "b"]})
    write_deltalake(uri, data, partition_by=["day"])
    enable_deletion_vectors(DeltaTable(uri))
    DeltaTable(uri).create_checkpoint()
    table = Location(uri)
    version = DeltaTable(uri).version()
    (path,) = [p for p in log_files(table, version, _log_paths(uri)) if "day=b" in p]
    assert log_files(table, version, [path])[path].partition_values == {"day": "b"}
    delete(table, path, [1])
    assert ids(table) == [0, 1, 2, 3, 5]


def _log_paths(uri: str) -> list[str]:
    return [p.split(uri.rstrip("/") + "/", 1)[-1] for p in DeltaTable(uri).file_uris()]


def test_a_dv_commit_on_s3_is_conditional_and_read_by_delta_rs(
    s3_server: S3Server, s3_bucket: str
) -> None:
    """On S3 (moto) the DV file, the log replay and the If-None-Match commit work as on disk."""
    table = Location(f"s3a://{s3_bucket}/t", StorageOptions.of(s3_server.options()))
    options = table.delta_options()
    write_deltalake(
        table.url, pa.table({"id": pa.array(range(10), pa.int64())}), storage_options=options
    )
    enable_deletion_vectors(DeltaTable(table.url, storage_options=options))
    delta = DeltaTable(table.url, storage_options=options)
    (path,) = [uri.rsplit("/", 1)[-1] for uri in delta.file_uris()]
    version = delete(table, path, [2, 3])
    delete(table, path, [9], batch=2)
    assert ids(table) == [0, 1, 4, 5, 6, 7, 8]
    taken = table.child("_delta_log", f"{version:020d}.json")
    assert not taken.create_bytes(b"{}\n")
    assert DeltaTable(table.url, storage_options=options).transaction_version("q") == 2


def test_a_created_table_has_the_features_its_column_types_need(tmp_path: Path) -> None:
    """A TIMESTAMP_NTZ column, even nested, adds timestampNtz: delta-rs reads the table."""

    def schema(kind: object) -> str:
        fields = [
            {"name": "id", "type": "long", "nullable": False, "metadata": {}},
            {"name": "inner", "type": kind, "nullable": True, "metadata": {}},
        ]
        return json.dumps({"type": "struct", "fields": fields})

    nested = {
        "type": "struct",
        "fields": [{"name": "at", "type": "timestamp_ntz", "nullable": True, "metadata": {}}],
    }
    for name, kind, features in (
        ("plain", "string", ["deletionVectors"]),
        ("ntz", nested, ["deletionVectors", "timestampNtz"]),
    ):
        table = Location(str(tmp_path / name))
        assert create_table(table, schema(kind), DeletionCommit("q", 0, {}), {}) == 0
        protocol = DeltaTable(table.url).protocol()
        assert protocol.reader_features == features, name
        assert protocol.writer_features == features, name
