"""Changes read for planning: compressed in memory up to a bound, spilled beyond it.

A connector's driver reads its log as a stream and appends every change of a captured table
here, in order, as it arrives: a transaction of millions of changes never exists as one Python
list. Every :data:`CHUNK_CHANGES` changes become one :class:`Chunk`, an LZ4-compressed Arrow IPC
stream of the connector's columns (postgres: the plugin's text or messages, and for pgoutput
each change's relation; mysql: the change rows' texts). Chunks stay in memory until their
compressed bytes reach the store's limit (option ``streamBufferSize``); later chunks are written
to the spill location (under option ``snapshotDir``) and only their location is kept.
Partitions carry the chunks they cover, so executors decode one chunk at a time as well: memory
is bounded on both sides, whatever a transaction's size.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.ipc

from spark_ckpt.errors import SourcePathError, StorageError
from spark_ckpt.state.storage import Location

__all__ = ["CHUNK_CHANGES", "ChangeStore", "Chunk", "Span"]

CHUNK_CHANGES = 16_384
"""Changes per chunk: what an executor decodes (and holds decoded) at once."""

_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


@dataclass(frozen=True)
class Chunk:
    """Up to :data:`CHUNK_CHANGES` consecutive changes: inline bytes, or a spill file.

    Attributes
    ----------
    count
        Changes in the chunk.
    data
        The Arrow IPC stream, when kept in memory.
    location
        The spill file holding it, otherwise.
    """

    count: int
    data: bytes | None = None
    location: Location | None = None

    def read(self) -> pa.RecordBatch:
        """The chunk's changes, one column per column of its store (executor or driver, per chunk).

        Raises
        ------
        SourcePathError
            When a spilled chunk cannot be read here (the spill is not on shared storage).
        """
        if self.data is not None:
            table = pa.ipc.open_stream(self.data).read_all()
        else:
            assert self.location is not None
            try:
                with self.location.open_input() as source:
                    table = pa.ipc.open_stream(source).read_all()
            except StorageError as e:
                raise SourcePathError(
                    f"the spilled changes {self.location.url} cannot be read here ({e}). Beyond "
                    f"local mode the spill must be on storage the driver and executors share: "
                    f"set option snapshotDir to an object-store URI (s3a://bucket/prefix) or a "
                    f"shared mount"
                ) from e
        return table.combine_chunks().to_batches()[0]  # a chunk is never empty (seal)


Span = tuple[Chunk, int, int]
"""``(chunk, first change in it, number of changes)``: part of a chunk."""


class ChangeStore:
    """The changes of one read, in order; positions are indexes into the whole sequence.

    Lives on the driver (the reader process) for one read's transactions.

    Parameters
    ----------
    schema
        The columns of a change (what :meth:`append` takes, in order).
    spill_directory
        Where chunks beyond ``memory_limit`` go.
    memory_limit
        Compressed bytes kept in memory before chunks are spilled.
    """

    def __init__(self, schema: pa.Schema, spill_directory: Location, memory_limit: int) -> None:
        self.schema = schema
        self.spill_directory = spill_directory
        self.memory_limit = memory_limit
        self.chunks: list[Chunk] = []
        self.size = 0
        self.inline_bytes = 0
        self.spilled_chunks = 0
        self._name = uuid.uuid4().hex[:12]
        self._columns: list[list[object]] = [[] for _ in schema]

    def append(self, values: Sequence[object]) -> int:
        """Add one change, a value per column; return its position (driver, per change)."""
        for column, value in zip(self._columns, values, strict=True):
            column.append(value)
        if len(self._columns[0]) >= CHUNK_CHANGES:
            self.seal()
        self.size += 1
        return self.size - 1

    @property
    def unsealed(self) -> int:
        """Changes appended since the last chunk."""
        return len(self._columns[0])

    def seal(self) -> None:
        """Turn the changes appended since the last chunk into one (driver)."""
        count = self.unsealed
        if not count:
            return
        batch = pa.record_batch(
            [
                pa.array(column, field.type)
                for column, field in zip(self._columns, self.schema, strict=True)
            ],
            schema=self.schema,
        )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema, options=_IPC) as writer:
            writer.write_batch(batch)
        data = sink.getvalue().to_pybytes()
        self._columns = [[] for _ in self.schema]
        if self.inline_bytes + len(data) <= self.memory_limit:
            self.inline_bytes += len(data)
            self.chunks.append(Chunk(count, data=data))
            return
        location = self.spill_directory.child(f"{self._name}-{len(self.chunks):06d}.arrow")
        location.write_bytes(data)
        self.spilled_chunks += 1
        self.chunks.append(Chunk(count, location=location))

    def spans(self, first: int, count: int) -> list[Span]:
        """The chunk parts holding positions ``first .. first + count - 1`` (driver).

        Positions not yet in a chunk are sealed into one first.
        """
        if first + count > self.size - self.unsealed:
            self.seal()
        found: list[Span] = []
        start = 0
        for chunk in self.chunks:
            end = start + chunk.count
            lo, hi = max(first, start), min(first + count, end)
            if lo < hi:
                found.append((chunk, lo - start, hi - lo))
            if end >= first + count:
                break
            start = end
        return found

    def discard(self) -> None:
        """Delete the spilled chunks (driver, once no batch reads them)."""
        for chunk in self.chunks:
            if chunk.location is not None:
                chunk.location.delete()
        self.chunks = []
