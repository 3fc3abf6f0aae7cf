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
restart. The key ranges, the state and the spill are shared with the mysql connector
(:mod:`spark_ckpt.sources.chunks`, :mod:`spark_ckpt.sources.chunk_spill`); what is
PostgreSQL's own is the read's MVCC snapshot. Pure bookkeeping here; the connector runs it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from spark_ckpt.state.storage import Location
from spark_ckpt.testing.faults import crash_point

from ..chunk_spill import (
    ChunkEmitPartition,
    chunk_files,
    emit_rows,
    kept,
    spilled_keys,
    write_chunk_rows,
)
from ..chunks import ALL_KEYS, IncrementalState, PendingChunk
from .chunks import read_chunk
from .tables import TableInfo
from .visibility import ChunkSnapshot

__all__ = [
    "ALL_KEYS",
    "ChunkEmitPartition",
    "ChunkRead",
    "ChunkReadPartition",
    "IncrementalState",
    "PendingChunk",
    "chunk_files",
    "emit_rows",
    "kept",
    "load_read",
    "run_chunk_read",
    "spilled_keys",
]


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


@dataclass(frozen=True)
class ChunkReadPartition:
    """Read one chunk on an executor and spill it; yields no rows."""

    dsn: str
    table: TableInfo
    chunk: PendingChunk
    directory: Location

    def __repr__(self) -> str:  # the DSN may hold a password
        return f"ChunkReadPartition({self.chunk.name})"


def run_chunk_read(partition: ChunkReadPartition) -> None:
    """Read the chunk and write its rows, then its :class:`ChunkRead` (executor, per task).

    Written in that order, so a :class:`ChunkRead` names rows that are complete; a task run
    again overwrites both.
    """
    rows = read_chunk(partition.dsn, partition.table, partition.chunk.bounds)
    crash_point("during_chunk_read", partition.chunk.bounds.index)
    rows_file, read_file = chunk_files(partition.directory, partition.chunk)
    write_chunk_rows(rows_file, rows.keys, rows.afters)
    read = ChunkRead(len(rows.keys), rows.snapshot, rows.read_at_us, rows.racing)
    read_file.write_bytes(read.to_bytes())


def load_read(directory: Location, chunk: PendingChunk) -> ChunkRead | None:
    """The chunk's :class:`ChunkRead`, or None when it was not read (driver)."""
    raw = chunk_files(directory, chunk)[1].read_bytes()
    return None if raw is None else ChunkRead.from_bytes(raw)
