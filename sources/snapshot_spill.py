"""An initial snapshot's rows spilled to files, and the partitions of the batch that delivers them.

A connector's one-unit snapshot (``snapshot=initial``: postgres, mysql) reads its tables in one
consistent transaction on the driver. Its rows go to Arrow IPC files in a spill location (option
``snapshotDir``: a local directory, or an object-store prefix executors on other machines can
read) instead of the driver's memory, with a manifest that the connector writes beside them.
The batch that delivers the snapshot is one unit (``txn_order`` 0, ``op='r'``) whose partitions
carry the files' locations and each file's first row index, so an executor builds the rows of its
files without the driver holding any of them. A re-run of that batch after a restart reads the
same files again: the snapshot's batch is the same however often it runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.ipc

from spark_ckpt.errors import SourcePathError, StorageError
from spark_ckpt.state.storage import InputFile, Location

from .schema import change_batch, with_types

__all__ = [
    "FILE_ROWS",
    "MANIFEST",
    "SPILL_SCHEMA",
    "SnapshotPartition",
    "SpillDirectory",
    "snapshot_partitions",
    "snapshot_rows",
]

SPILL_SCHEMA = pa.schema([("table", pa.string()), ("key", pa.string()), ("after", pa.string())])
"""What a spill file holds per row; the rest of the output row is the same for every row."""

FILE_ROWS = 50_000
"""Rows per spill file (a file is read by one task at most)."""

MANIFEST = "manifest.json"
"""The connector's manifest of the spill (its format is the connector's)."""


class SpillDirectory:
    """A directory (or object-store prefix) of spill files plus the connector's manifest.

    Parameters
    ----------
    directory
        Where the files go. Executors read them: beyond ``local`` mode it must be storage they
        share with the driver (an object store, or a shared mount).
    """

    def __init__(self, directory: Location) -> None:
        self.directory = directory

    def manifest_bytes(self) -> bytes | None:
        """The manifest as written, or None (driver)."""
        return self.directory.child(MANIFEST).read_bytes()

    def write_manifest_bytes(self, data: bytes) -> None:
        """Durably replace the manifest (one whole object; driver)."""
        self.directory.child(MANIFEST).write_bytes(data)

    def exists(self) -> bool:
        """True while anything is spilled (driver)."""
        return bool(self.directory.list())

    def clear(self) -> None:
        """Remove every entry: spill files and manifest (driver)."""
        for entry in self.directory.list():
            self.directory.child(entry.name).delete()

    def file(self, name: str) -> Location:
        """A spill file's location."""
        return self.directory.child(name)

    def write_file(self, table: str, keys: pa.Array, afters: pa.Array, index: int) -> str:
        """Write the ``index``-th spill file: one table's rows; return its name (driver)."""
        name = f"part-{index:05d}.arrow"
        batch = pa.RecordBatch.from_arrays(
            [pa.repeat(table, len(afters)).cast(pa.string()), keys, afters], schema=SPILL_SCHEMA
        )
        with (
            self.file(name).open_output() as sink,
            pa.ipc.new_file(sink, SPILL_SCHEMA) as writer,
        ):
            writer.write_batch(batch)
        return name


@dataclass(frozen=True)
class SnapshotPartition:
    """Spill files of the snapshot: ``(file path, index of its first row)``."""

    files: tuple[tuple[Location, int], ...]
    total: int
    txn_id: str
    taken_at_us: int
    source: str
    column_types: tuple[tuple[str, str], ...] = ()
    """``(table, column_types text)`` per captured table, with ``columnTypes=true``."""


def snapshot_partitions(
    files: Sequence[tuple[str, int]],
    spill: SpillDirectory,
    partition: SnapshotPartition,
    rows_per_partition: int,
) -> list[object]:
    """The snapshot's partitions (driver, once per snapshot batch).

    ``files`` are the manifest's ``(file name, rows)`` in order. Each partition is
    ``partition`` with whole spill files of about ``rows_per_partition`` rows in all.
    """
    partitions: list[object] = []
    chosen: list[tuple[Location, int]] = []
    rows_in = 0
    index = 0
    for name, rows in files:
        chosen.append((spill.file(name), index))
        index += rows
        rows_in += rows
        if rows_in >= rows_per_partition:
            partitions.append(dataclasses.replace(partition, files=tuple(chosen)))
            chosen, rows_in = [], 0
    if chosen:
        partitions.append(dataclasses.replace(partition, files=tuple(chosen)))
    return partitions


def snapshot_rows(partition: SnapshotPartition, column_types: bool) -> Iterator[pa.RecordBatch]:
    """The change rows of a snapshot partition's spill files (executor, per task)."""
    types_of = dict(partition.column_types)
    for spilled_file, first_index in partition.files:
        with _open_spill(spilled_file) as source:
            reader = pa.ipc.open_file(source)
            offset = first_index
            for i in range(reader.num_record_batches):
                spilled = reader.get_batch(i)
                n = spilled.num_rows
                batch = change_batch(
                    source=pa.array([partition.source] * n, pa.string()),
                    txn_id=pa.array([partition.txn_id] * n, pa.string()),
                    txn_order=pa.array([0] * n, pa.int64()),
                    txn_size=pa.array([partition.total] * n, pa.int32()),
                    event_index=pa.array(range(offset, offset + n), pa.int32()),
                    commit_ts=pa.array([partition.taken_at_us] * n, pa.timestamp("us", tz="UTC")),
                    table=spilled.column("table"),
                    op=pa.array(["r"] * n, pa.string()),
                    key=spilled.column("key"),
                    before=pa.nulls(n, pa.string()),
                    after=spilled.column("after"),
                )
                if column_types:
                    tables = spilled.column("table").to_pylist()
                    types = pa.array([types_of.get(t) for t in tables], pa.string())
                    batch = with_types(batch, types)
                yield batch
                offset += n


def _open_spill(spilled_file: Location) -> InputFile:
    """Open a snapshot spill file on an executor, or say why it cannot be seen there.

    The reader's later reads (the record batches, one at a time) raise the storage layer's
    errors too, naming the file: on an object store a read can fail after the open did not.
    """
    try:
        return spilled_file.open_input()
    except StorageError as e:
        raise SourcePathError(
            f"the snapshot spill file {spilled_file.url} cannot be read on this executor ({e}). "
            f"Beyond local mode the spill must be on storage the driver and executors share: "
            f"set option snapshotDir to an object-store URI (s3a://bucket/prefix) or a shared "
            f"mount"
        ) from e
