"""An incremental snapshot's chunks spilled by their readers, and emitted as units.

An executor reads a chunk (:mod:`.chunks`) and writes its rows, ``key`` and ``after`` texts, to
an Arrow IPC file in the snapshot's spill location, beside a small JSON record of the read the
connector defines (its watermarks). A later batch emits the chunk as one unit (``op='r'``)
without the keys its window dropped (:func:`~.chunks.window_dropped`). Nothing here depends on
the database: the postgres and mysql connectors share it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc

from spark_ckpt.errors import ChangeDecodeError, SourcePathError, StorageError
from spark_ckpt.model.schema_changes import SCHEMA_CHANGE_OP
from spark_ckpt.state.storage import Location

from .chunks import ALL_KEYS, PendingChunk
from .schema import change_batch, with_types

__all__ = [
    "ChunkEmitPartition",
    "chunk_files",
    "emit_rows",
    "kept",
    "spilled_keys",
    "write_chunk_rows",
]

_SPILL_SCHEMA = pa.schema([("key", pa.string()), ("after", pa.string())])


def chunk_files(directory: Location, chunk: PendingChunk) -> tuple[Location, Location]:
    """The chunk's rows (Arrow IPC) and the record of its read (JSON) in the spill."""
    return directory.child(f"{chunk.name}.arrow"), directory.child(f"{chunk.name}.json")


def write_chunk_rows(rows_file: Location, keys: pa.Array, afters: pa.Array) -> None:
    """Write a chunk's rows (executor, once per chunk read); a task run again overwrites them."""
    batch = pa.record_batch([keys, afters], schema=_SPILL_SCHEMA)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(
        sink, _SPILL_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="lz4")
    ) as w:
        w.write_batch(batch)
    rows_file.write_bytes(sink.getvalue().to_pybytes())


def spilled_keys(rows_file: Location) -> pa.Array:
    """The key column of a spilled chunk (driver: to count what remains after drops)."""
    return _read_spill(rows_file).column("key").combine_chunks()


def _read_spill(rows_file: Location) -> pa.Table:
    try:
        with rows_file.open_input() as source:
            return pa.ipc.open_file(source).read_all()
    except StorageError as e:
        raise SourcePathError(
            f"the snapshot chunk {rows_file.url} cannot be read here ({e}). Beyond local mode "
            f"the spill must be on storage the driver and executors share: set option "
            f"snapshotDir to an object-store URI (s3a://bucket/prefix) or a shared mount"
        ) from e


def kept(keys: pa.Array, dropped: frozenset[str]) -> pa.Array:
    """A boolean mask: the rows whose key is not dropped."""
    if ALL_KEYS in dropped:
        return pa.array([False] * len(keys), pa.bool_())
    if not dropped:
        return pa.array([True] * len(keys), pa.bool_())
    return pc.invert(pc.is_in(keys, value_set=pa.array(sorted(dropped), pa.string())))


@dataclass(frozen=True)
class ChunkEmitPartition:
    """Emit one chunk's spilled rows as a unit, without the dropped keys.

    Attributes
    ----------
    rows_file
        The spilled rows.
    dropped
        Key texts to leave out.
    size
        Rows that remain (checked on the executor).
    closing
        The last chunk of a table read again: the ``rebuild='end'`` schema change row's
        ``before`` and ``after`` texts, which end the unit.
    """

    source: str
    rows_file: Location
    dropped: frozenset[str]
    size: int
    txn_id: str
    txn_order: int
    read_at_us: int
    table: str
    column_types: str | None
    closing: tuple[str | None, str] | None = None


def emit_rows(partition: ChunkEmitPartition) -> Iterator[pa.RecordBatch]:
    """The chunk's remaining rows as one unit (executor, per task)."""
    table = _read_spill(partition.rows_file)
    table = table.filter(kept(table.column("key").combine_chunks(), partition.dropped))
    n = table.num_rows
    if n != partition.size:
        raise ChangeDecodeError(
            f"snapshot chunk {partition.rows_file.url} holds {n} rows to emit, "
            f"planned {partition.size}"
        )
    ops, keys = ["r"] * n, table.column("key").combine_chunks()
    befores, afters = pa.nulls(n, pa.string()), table.column("after").combine_chunks()
    if partition.closing is not None:
        ops.append(SCHEMA_CHANGE_OP)
        keys = pa.concat_arrays([keys, pa.nulls(1, pa.string())])
        befores = pa.concat_arrays([befores, pa.array([partition.closing[0]], pa.string())])
        afters = pa.concat_arrays([afters, pa.array([partition.closing[1]], pa.string())])
    size = len(ops)
    if size == 0:
        return
    batch = change_batch(
        source=pa.array([partition.source] * size, pa.string()),
        txn_id=pa.array([partition.txn_id] * size, pa.string()),
        txn_order=pa.array([partition.txn_order] * size, pa.int64()),
        txn_size=pa.array([size] * size, pa.int32()),
        event_index=pa.array(range(size), pa.int32()),
        commit_ts=pa.array([partition.read_at_us] * size, pa.timestamp("us", tz="UTC")),
        table=pa.array([partition.table] * size, pa.string()),
        op=pa.array(ops, pa.string()),
        key=keys,
        before=befores,
        after=afters,
    )
    if partition.column_types is not None:
        batch = with_types(batch, pa.array([partition.column_types] * size, pa.string()))
    yield batch
