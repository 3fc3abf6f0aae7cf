"""The initial snapshot's partitions: its spill files, grouped on the driver, read on executors.

``snapshot=initial`` reads the tables once, in one transaction, into Arrow IPC spill files
(:mod:`.snapshot`); the batch that delivers them is one unit (``txn_order`` 0, ``op='r'``). Its
partitions carry the spill files' locations and each file's first row index, so an executor
builds the rows of its files without the driver holding any of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.ipc

from spark_ckpt.errors import SourcePathError, StorageError
from spark_ckpt.state.storage import InputFile, Location

from ..schema import change_batch, with_types
from .snapshot import SnapshotManifest, SnapshotSpill

__all__ = ["PgSnapshotPartition", "snapshot_partitions", "snapshot_rows"]


@dataclass(frozen=True)
class PgSnapshotPartition:
    """Spill files of the snapshot: ``(file path, index of its first row)``."""

    files: tuple[tuple[Location, int], ...]
    total: int
    txn_id: str
    taken_at_us: int
    source: str
    column_types: tuple[tuple[str, str], ...] = ()
    """``(table, column_types text)`` per captured table, with ``columnTypes=true``."""


def snapshot_partitions(
    manifest: SnapshotManifest,
    spill: SnapshotSpill,
    partition: PgSnapshotPartition,
    rows_per_partition: int,
) -> list[object]:
    """The snapshot's partitions (driver, once per snapshot batch).

    Each is ``partition`` with whole spill files of about ``rows_per_partition`` rows in all.
    """
    partitions: list[object] = []
    files: list[tuple[Location, int]] = []
    rows_in = 0
    index = 0
    for name, rows in manifest.files:
        files.append((spill.file(name), index))
        index += rows
        rows_in += rows
        if rows_in >= rows_per_partition:
            partitions.append(dataclasses.replace(partition, files=tuple(files)))
            files, rows_in = [], 0
    if files:
        partitions.append(dataclasses.replace(partition, files=tuple(files)))
    return partitions


def snapshot_rows(partition: PgSnapshotPartition, column_types: bool) -> Iterator[pa.RecordBatch]:
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
