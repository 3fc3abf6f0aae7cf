"""The incremental snapshot (``snapshot=incremental``): resumable, chunked, read in parallel.

The slot streams from the query's start, and the tables' existing rows come in primary-key
chunks alongside the stream (Netflix's DBLog; Flink CDC's incremental snapshot):

1. In batch M the driver plans up to ``snapshotParallelism`` chunks (:func:`.chunks.next_chunk`)
   and adds one *read* partition per chunk: an executor reads it in a short transaction of its
   own (:func:`.chunks.read_chunk`) and spills its rows with the snapshot it read at
   (:class:`ChunkRead`). Such a partition yields no rows.
2. In a later batch N, once the stream has been read past a chunk's high watermark, the chunk
   is *emitted*: its rows become one unit (``op='r'``) placed after the batch's transactions,
   without the keys that a transaction the chunk's snapshot did not see changed before that
   point (:mod:`.visibility`). The stream itself carries those keys' newer states.

Every step is in the offsets (:class:`IncrementalState`), so a restart re-reads no finished
chunk: only the chunks of the batch that was running. Checkpoints fall between transactions
and chunks, so every one is available. While chunks are pending the slot is confirmed no
further than the oldest pending chunk's window start, so the window can be read again after a
restart. Pure bookkeeping here; the connector runs it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc

from spark_ckpt.errors import ChangeDecodeError, SourcePathError, StorageError
from spark_ckpt.model.schema_changes import SCHEMA_CHANGE_OP
from spark_ckpt.state.storage import Location
from spark_ckpt.testing.faults import crash_point

from ..schema import change_batch, with_types
from .chunks import ChunkBounds, read_chunk
from .tables import TableInfo
from .visibility import ChunkSnapshot

__all__ = [
    "ALL_KEYS",
    "ChunkEmitPartition",
    "ChunkRead",
    "ChunkReadPartition",
    "IncrementalState",
    "PendingChunk",
    "emit_rows",
    "run_chunk_read",
]

_SPILL_SCHEMA = pa.schema([("key", pa.string()), ("after", pa.string())])


@dataclass(frozen=True)
class PendingChunk:
    """A chunk planned for reading and not emitted yet.

    Attributes
    ----------
    bounds
        Its key range.
    since
        The LSN its batch started at: its window of stream changes to reconcile starts here.
    read_in
        The checkpoint (batch) whose partitions read it.
    rebuild
        For a table read again after a schema change (:attr:`IncrementalState.rebuild`): its
        place in the snapshot's sequence of tables; None for the snapshot's own tables.
    """

    bounds: ChunkBounds
    since: int
    read_in: int
    rebuild: int | None = None

    @property
    def name(self) -> str:
        """A file-name-safe identity: ``<table>-<index>`` (``<table>-r<place>-<index>``)."""
        if self.rebuild is None:
            return f"{self.bounds.table}-{self.bounds.index:06d}"
        return f"{self.bounds.table}-r{self.rebuild}-{self.bounds.index:06d}"

    @property
    def read(self) -> tuple[str, int | None]:
        """Which read of its table it belongs to: ``(table, rebuild)``."""
        return (self.bounds.table, self.rebuild)

    def to_json(self) -> dict[str, Any]:
        """For offsets."""
        value = {**self.bounds.to_json(), "since": self.since, "readIn": self.read_in}
        if self.rebuild is not None:
            value["rebuild"] = self.rebuild
        return value

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> PendingChunk:
        """Parse :meth:`to_json`."""
        rebuild = value.get("rebuild")
        return cls(
            ChunkBounds.from_json(value),
            int(value["since"]),
            int(value["readIn"]),
            None if rebuild is None else int(rebuild),
        )


@dataclass(frozen=True)
class IncrementalState:
    """Where an incremental snapshot is, in an offset.

    The tables are read in sequence: the captured tables (``snapshot=incremental``), then
    those read again because of a schema change a mirror cannot follow in place (``rebuild``).

    Attributes
    ----------
    table
        Index in that sequence of the table whose chunks are being planned (its length: all
        planned).
    after
        The last planned chunk's upper key in that table (None: none planned yet).
    index
        The next chunk's number in that table.
    pending
        Chunks read (or being read in the batch ending here) but not emitted.
    chunks_done, rows_done
        Emitted so far.
    rebuild
        Tables read again after the captured ones, in the order their schema changes came.
    """

    table: int = 0
    after: tuple[str, ...] | None = None
    index: int = 0
    pending: tuple[PendingChunk, ...] = ()
    chunks_done: int = 0
    rows_done: int = 0
    rebuild: tuple[str, ...] = ()

    def planning_done(self, tables: int) -> bool:
        """True once every table's last chunk is planned (``tables``: the captured ones)."""
        return self.table >= tables + len(self.rebuild)

    def superseded(self, read: tuple[str, int | None], tables: int) -> bool:
        """Whether a later read of the same table is queued: this one's rows are not needed.

        A second schema change that needs a new read, during one, begins a new rebuild; the
        earlier read is neither planned further, nor emitted, nor ended.
        """
        table, place = read
        return place is not None and table in self.rebuild[place - tables + 1 :]

    def closes(self, read: tuple[str, int | None]) -> bool:
        """Whether a rebuild's ``read`` has every chunk planned and none pending (its end)."""
        place = read[1]
        return (
            place is not None
            and self.table > place
            and not any(c.read == read for c in self.pending)
        )

    def finished(self, tables: int) -> bool:
        """True once every chunk is emitted: the stream goes on alone."""
        return self.planning_done(tables) and not self.pending

    def floor(self) -> int | None:
        """The LSN the slot may be confirmed up to at most (None: no limit)."""
        return min((c.since for c in self.pending), default=None)

    def to_json(self) -> dict[str, Any]:
        """For offsets (stable key order)."""
        return {
            "table": self.table,
            "after": None if self.after is None else list(self.after),
            "index": self.index,
            "pending": [c.to_json() for c in self.pending],
            "chunksDone": self.chunks_done,
            "rowsDone": self.rows_done,
            **({"rebuild": list(self.rebuild)} if self.rebuild else {}),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> IncrementalState:
        """Parse :meth:`to_json`."""
        after = value["after"]
        return cls(
            int(value["table"]),
            None if after is None else tuple(str(v) for v in after),
            int(value["index"]),
            tuple(PendingChunk.from_json(c) for c in value["pending"]),
            int(value["chunksDone"]),
            int(value["rowsDone"]),
            tuple(str(t) for t in value.get("rebuild", ())),
        )

    def with_pending(self, pending: tuple[PendingChunk, ...]) -> IncrementalState:
        """A copy with other pending chunks."""
        return replace(self, pending=pending)


@dataclass(frozen=True)
class ChunkRead:
    """What an executor's read of a chunk left in the spill: where, how many, and its snapshot.

    Attributes
    ----------
    rows
        Rows read.
    snapshot
        The snapshot it read at, with its high watermark.
    read_at_us
        When (the rows' ``commit_ts``).
    racing
        Transactions the snapshot did not see that had already committed when the read
        ended: their commits must be inside the chunk's window, or the chunk is read again.
    """

    rows: int
    snapshot: ChunkSnapshot
    read_at_us: int
    racing: tuple[int, ...] = ()

    def to_bytes(self) -> bytes:
        """JSON."""
        body = {
            "rows": self.rows,
            "snapshot": self.snapshot.to_json(),
            "readAtUs": self.read_at_us,
            "racing": list(self.racing),
        }
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> ChunkRead:
        """Parse :meth:`to_bytes`."""
        body = json.loads(raw)
        return cls(
            int(body["rows"]),
            ChunkSnapshot.from_json(body["snapshot"]),
            int(body["readAtUs"]),
            tuple(int(x) for x in body["racing"]),
        )


def chunk_files(directory: Location, chunk: PendingChunk) -> tuple[Location, Location]:
    """The chunk's rows (Arrow IPC) and its :class:`ChunkRead` (JSON) in the spill."""
    return directory.child(f"{chunk.name}.arrow"), directory.child(f"{chunk.name}.json")


@dataclass(frozen=True)
class ChunkReadPartition:
    """Read one chunk on an executor and spill it; yields no rows."""

    dsn: str
    table: TableInfo
    chunk: PendingChunk
    directory: Location

    def __repr__(self) -> str:  # the DSN may hold a password
        return f"ChunkReadPartition({self.chunk.name})"


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


def run_chunk_read(partition: ChunkReadPartition) -> None:
    """Read the chunk and write its rows, then its :class:`ChunkRead` (executor, per task).

    Written in that order, so a :class:`ChunkRead` names rows that are complete; a task run
    again overwrites both.
    """
    rows = read_chunk(partition.dsn, partition.table, partition.chunk.bounds)
    crash_point("during_chunk_read", partition.chunk.bounds.index)
    rows_file, read_file = chunk_files(partition.directory, partition.chunk)
    batch = pa.record_batch(
        [rows.keys, rows.afters],
        schema=_SPILL_SCHEMA,
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(
        sink, _SPILL_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="lz4")
    ) as w:
        w.write_batch(batch)
    rows_file.write_bytes(sink.getvalue().to_pybytes())
    read = ChunkRead(len(rows.keys), rows.snapshot, rows.read_at_us, rows.racing)
    read_file.write_bytes(read.to_bytes())


def load_read(directory: Location, chunk: PendingChunk) -> ChunkRead | None:
    """The chunk's :class:`ChunkRead`, or None when it was not read (driver)."""
    raw = chunk_files(directory, chunk)[1].read_bytes()
    return None if raw is None else ChunkRead.from_bytes(raw)


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


ALL_KEYS = "*"
"""A dropped "key" meaning every row: the table was truncated by a transaction the read missed."""


def kept(keys: pa.Array, dropped: frozenset[str]) -> pa.Array:
    """A boolean mask: the rows whose key is not dropped."""
    if ALL_KEYS in dropped:
        return pa.array([False] * len(keys), pa.bool_())
    if not dropped:
        return pa.array([True] * len(keys), pa.bool_())
    return pc.invert(pc.is_in(keys, value_set=pa.array(sorted(dropped), pa.string())))


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
