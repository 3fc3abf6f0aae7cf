"""Reads through the storage layer: typed errors at every read, not only at the open.

pyarrow opens an S3 object with a HEAD request and reads it with GETs, so an object deleted after
the open fails a later read, with whatever the SDK makes of the 404 (``NO_SUCH_KEY``,
``RESOURCE_NOT_FOUND``, or ``INTERNAL_FAILURE ... Failed to flush response stream`` when the
error body does not fit a small ranged read). Each of these must reach callers as
:class:`StorageNotFoundError`, as a missing file does on a local disk, and any other failed read
as a plain :class:`StorageError`. Checked on a local directory and on the S3 server (moto).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest

from harness.servers.s3 import S3Server
from spark_ckpt.errors import StorageError
from spark_ckpt.state import storage
from spark_ckpt.state.parquet_rows import row_group_positions
from spark_ckpt.state.storage import (
    InputFile,
    Location,
    StorageNotFoundError,
    StorageOptions,
    iter_chunks,
)

ROWS = pa.table({"id": list(range(1000)), "name": [f"n{i}" for i in range(1000)]})


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """A fresh, empty location on each kind of store."""
    if request.param == "local":
        return Location(str(tmp_path / "root"))
    return s3_location(request)


@pytest.fixture
def s3_root(request: pytest.FixtureRequest) -> Location:
    """A fresh, empty location on the S3 server (what only object stores do)."""
    return s3_location(request)


def s3_location(request: pytest.FixtureRequest) -> Location:
    server: S3Server = request.getfixturevalue("s3_server")
    bucket: str = request.getfixturevalue("s3_bucket")
    return Location(f"s3a://{bucket}/{uuid.uuid4().hex[:8]}", StorageOptions.of(server.options()))


def write_parquet(target: Location, rows: pa.Table = ROWS) -> None:
    with target.open_output() as sink:
        pq.write_table(rows, sink, row_group_size=100)


class DeletedOnceOpened:
    """A file system that deletes each file it opens for reading right after the open.

    The publish race made certain: another publisher deletes the object between our open (a
    HEAD) and our first read (a GET).
    """

    def __init__(self, fs: Any) -> None:
        self._fs = fs

    def open_input_stream(self, path: str) -> Any:
        handle = self._fs.open_input_stream(path)
        self._fs.delete_file(path)
        return handle

    def open_input_file(self, path: str) -> Any:
        handle = self._fs.open_input_file(path)
        self._fs.delete_file(path)
        return handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fs, name)


def deleted_once_opened(location: Location) -> Location:
    """``location``, reached through :class:`DeletedOnceOpened`."""
    object.__setattr__(location, "_fs", DeletedOnceOpened(location.fs))
    return location


class FailingRead:
    """An open file whose reads fail the way a broken S3 response does, the object intact."""

    closed = False

    def read(self, nbytes: int | None = None) -> bytes:
        raise OSError(
            "AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush response "
            "stream (eof: 0, bad: 1)"
        )

    read_buffer = read

    def close(self) -> None:
        self.closed = True


# -- read_parquet ---------------------------------------------------------------------------


def test_read_parquet_reads_every_column_or_the_ones_named(root: Location) -> None:
    """All columns by default; ``columns`` selects, in the order given."""
    target = root.child("t.parquet")
    write_parquet(target)
    assert target.read_parquet().equals(ROWS)
    assert target.read_parquet(["name", "id"]).column_names == ["name", "id"]


def test_read_parquet_skips_optional_columns_the_file_lacks(root: Location) -> None:
    """``missing_columns="skip"`` reads the named columns the file has, and no others."""
    target = root.child("t.parquet")
    write_parquet(target)
    assert target.read_parquet(["id", "column_types"], missing_columns="skip").column_names == [
        "id"
    ]


# -- missing files --------------------------------------------------------------------------


def test_a_missing_file_is_storage_not_found_at_every_reader(root: Location) -> None:
    """read_parquet, open_input and iter_chunks raise it; read_bytes gives None."""
    missing = root.child("missing.parquet")
    for read in (
        missing.read_parquet,
        missing.open_input,
        lambda: list(iter_chunks(missing, 0, 9, 3)),
    ):
        with pytest.raises(StorageNotFoundError, match=r"missing\.parquet"):
            read()
    assert missing.read_bytes() is None


def test_storage_not_found_is_a_storage_error_and_a_file_not_found_error(root: Location) -> None:
    """Callers that catch either still catch it."""
    with pytest.raises(StorageNotFoundError) as caught:
        root.child("missing").open_input()
    assert isinstance(caught.value, StorageError)
    assert isinstance(caught.value, FileNotFoundError)


def test_a_failed_read_of_a_file_still_there_is_a_storage_error_not_not_found(
    root: Location,
) -> None:
    """Only a file that is gone is "not found"; a broken read of one that is there is not."""
    target = root.child("t.parquet")
    write_parquet(target)
    # The location's own translation of read errors, around a stand-in file that fails.
    reader = InputFile(target._reading, FailingRead())  # type: ignore[arg-type]
    with pytest.raises(StorageError, match=r"t\.parquet") as caught:
        reader.read(10)
    assert not isinstance(caught.value, StorageNotFoundError)


# -- deleted after the open (object stores) -------------------------------------------------


def test_an_object_deleted_after_the_open_fails_the_next_read_as_not_found(
    s3_root: Location,
) -> None:
    """The 404 of a small ranged GET loses its status in the SDK; the store is asked instead."""
    target = s3_root.child("t.bin")
    target.write_bytes(b"0123456789" * 100)
    with target.open_input() as handle:
        assert handle.read(4) == b"0123"
        target.delete()
        with pytest.raises(StorageNotFoundError, match="deleted after it was opened"):
            handle.read(4)


def test_pyarrow_readers_over_an_open_input_raise_storage_not_found(s3_root: Location) -> None:
    """pq.read_table and pa.ipc read through InputFile, so the typed error comes through."""
    parquet, arrow = s3_root.child("t.parquet"), s3_root.child("t.arrow")
    write_parquet(parquet)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, ROWS.schema) as writer:
        writer.write_table(ROWS, max_chunksize=100)
    arrow.write_bytes(sink.getvalue().to_pybytes())
    with parquet.open_input() as handle:
        parquet.delete()
        with pytest.raises(StorageNotFoundError):
            pq.read_table(handle)
    with arrow.open_input() as handle:
        reader = pa.ipc.open_file(handle)  # reads the footer
        arrow.delete()
        with pytest.raises(StorageNotFoundError):
            reader.get_batch(reader.num_record_batches - 1)


def test_read_parquet_of_an_object_deleted_after_the_open_is_not_found(s3_root: Location) -> None:
    """The mirror publish's read of a folded file that a concurrent publisher deleted."""
    target = s3_root.child("t.parquet")
    write_parquet(target)
    with pytest.raises(StorageNotFoundError, match=r"t\.parquet"):
        deleted_once_opened(target).read_parquet()


def test_read_bytes_of_an_object_deleted_after_the_open_is_none(s3_root: Location) -> None:
    """A manifest or intent deleted between the listing's open and its read reads as missing."""
    target = s3_root.child("intent")
    target.write_bytes(b"part-00000.parquet")
    assert deleted_once_opened(target).read_bytes() is None


def test_iter_chunks_of_an_object_deleted_while_read_is_not_found(s3_root: Location) -> None:
    """A copy or a log read that loses the object part way through fails typed."""
    target = s3_root.child("t.bin")
    target.write_bytes(b"x" * 64)
    chunks = iter_chunks(target, 0, 64, 8)
    assert next(chunks) == b"x" * 8
    target.delete()
    with pytest.raises(StorageNotFoundError):
        next(chunks)


def test_copying_a_large_object_deleted_during_the_copy_is_missing_and_leaves_no_part(
    s3_root: Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    """copy_to says None, as for a file missing at the start, and deletes what it wrote."""
    monkeypatch.setattr(storage, "COPY_CHUNK", 16)  # streamed in chunks, not copied whole
    source, target = s3_root.child("big"), s3_root.child("copy", "big")
    source.write_bytes(b"y" * 64)
    assert deleted_once_opened(source).copy_to(target) is None
    assert not target.exists()


def test_read_parquet_reads_only_the_row_groups_holding_the_rows_asked_for(
    root: Location,
) -> None:
    """``rows`` gives those rows in their order; groups holding none of them are not read."""
    target = root.child("groups.parquet")
    table = pa.table({"id": list(range(100)), "name": [f"n{i}" for i in range(100)]})
    with target.open_output() as out:
        pq.write_table(table, out, row_group_size=10)
    rows = [95, 3, 41, 40, 7]
    assert target.read_parquet(rows=rows).equals(table.take(rows))
    assert target.read_parquet(["name"], rows=[12]).to_pylist() == [{"name": "n12"}]
    assert row_group_positions([10] * 10, rows) == ([0, 4, 9], [25, 3, 11, 10, 7])
    with pytest.raises(IndexError, match="row 100 is outside a file of 100 rows"):
        row_group_positions([10] * 10, [100])
