"""The driver's side of the incremental snapshot: which chunks a batch reads and emits.

:class:`ChunkPlanner` runs in the reader process once per batch (and again for a batch re-run
after a restart, which must give the same partitions). It is told where the batch's stream part
ends; it answers with the chunks to emit there (with the keys each must leave out), the chunks
to start reading, and the snapshot state the batch ends at (:mod:`.incremental`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import psycopg

from spark_ckpt.model.schema_changes import SchemaEvent
from spark_ckpt.state.storage import Location

from ..chunk_work import ChunkWork, discard_chunks, reads_of_logged_batch
from .chunks import next_chunk
from .incremental import (
    ChunkEmitPartition,
    ChunkRead,
    ChunkReadPartition,
    IncrementalState,
    PendingChunk,
    chunk_files,
    kept,
    load_read,
    spilled_keys,
)
from .schema_tracking import relation_schema
from .tables import TableInfo
from .types import types_json
from .visibility import dropped_keys

__all__ = ["ChunkPlanner", "WindowChange"]

WindowChange = tuple[int, int, str, str, str | None]
"""``(commit end LSN, xid, table, key text, old key text)`` of one change in a chunk's window."""


class ChunkPlanner:
    """Plans chunk reads and emissions (driver).

    Parameters
    ----------
    dsn
        For the executors' reads (never printed).
    source
        The output's ``source`` value.
    slot
        The slot's name (in the chunks' ``txn_id``).
    tables
        The captured tables, each with a primary key.
    directory
        Where chunks are spilled (``snapshotDir/chunks``).
    chunk_rows, parallelism
        Rows per chunk; chunks read at once.
    connection
        The driver's SQL connection (to find chunk bounds).
    window
        ``(since, upto) -> changes``: the stream's changes of transactions committing in
        ``[since, upto)``, read again from the slot.
    column_types
        Add ``column_types`` to emitted rows.
    describe
        A table read again after a schema change, described as it is now (its new columns).
    """

    def __init__(
        self,
        dsn: str,
        source: str,
        slot: str,
        tables: Sequence[TableInfo],
        directory: Location,
        chunk_rows: int,
        parallelism: int,
        connection: Callable[[], psycopg.Connection[Any]],
        window: Callable[[int, int], list[WindowChange]],
        column_types: bool = False,
        describe: Callable[[str], TableInfo] | None = None,
    ) -> None:
        self.dsn = dsn
        self.source = source
        self.slot = slot
        self.tables = list(tables)
        self.directory = directory
        self.chunk_rows = chunk_rows
        self.parallelism = parallelism
        self.connection = connection
        self.window = window
        self.column_types = column_types
        self._describe = describe
        self._rebuilt: dict[tuple[str, int], TableInfo] = {}  # as each rebuild first read it

    def _table(self, read: tuple[str, int | None]) -> TableInfo:
        """A chunk's table: captured, or as its rebuild found it (described once per read)."""
        name, place = read
        if place is None:
            return next(t for t in self.tables if t.name == name)
        found = self._rebuilt.get((name, place))
        if found is None:
            assert self._describe is not None, "rebuilds need a describe callback"
            found = self._rebuilt[(name, place)] = self._describe(name)
        return found

    def _sequence(self, state: IncrementalState, place: int) -> tuple[str, int | None]:
        """The table at ``place`` of the snapshot's sequence, as a chunk's ``read``."""
        if place < len(self.tables):
            return (self.tables[place].name, None)
        return (state.rebuild[place - len(self.tables)], place)

    def plan(
        self,
        state: IncrementalState,
        start_lsn: int,
        stream_end: int,
        reach: int,
        checkpoint: int,
        first_order: int,
    ) -> ChunkWork[ChunkReadPartition]:
        """A new batch's snapshot work (driver, per batch).

        Parameters
        ----------
        stream_end
            The end of the batch's last transaction (its start when it has none).
        reach
            How far the stream is known to hold nothing more for the batch (``>= stream_end``):
            the WAL a complete peek decoded, when the batch takes every transaction read.
        """
        reads = {c: load_read(self.directory, c) for c in state.pending}  # once per chunk
        # Emittable: read, and the stream is read past its high watermark.
        ready = [
            (c, read)
            for c, read in reads.items()
            if read is not None and read.snapshot.high_watermark <= reach
        ]
        # Placed where the last of them may be, not at the reach: the reach may fall inside a
        # record (the flushed position), the slot is confirmed up to the position, and a
        # transaction whose commit record starts before that is skipped by the server.
        position = max([stream_end, *(read.snapshot.high_watermark for _, read in ready)])
        ready_chunks = {c for c, _ in ready}
        # A rebuild ends with this batch when its last chunk is planned and all are ready.
        closable = {
            c.read
            for c in ready_chunks
            if c.rebuild is not None
            and state.table > c.rebuild
            and all(p in ready_chunks for p in state.pending if p.read == c.read)
        }
        emits, rereads, emitted, rows = self._emits(ready, position, first_order, closable, state)
        # A chunk whose read left nothing (its spill was lost) is read again.
        rereads += [c for c, read in reads.items() if read is None]
        state = state.after_emits(emitted, rows, rereads, start_lsn, checkpoint)
        state = self._plan_reads(state, start_lsn, checkpoint)
        to_read = [self._read(c) for c in state.pending if c.read_in == checkpoint]
        return ChunkWork(state, emits, to_read, emitted, position)

    def watermark(self, state: IncrementalState) -> int | None:
        """The highest high watermark among the read pending chunks (None: none read; driver).

        The stream must be read past it before they can all be emitted.
        """
        reads = [load_read(self.directory, c) for c in state.pending]
        return max((r.snapshot.high_watermark for r in reads if r is not None), default=None)

    def replan(
        self,
        start: IncrementalState,
        end: IncrementalState,
        position: int,
        checkpoint: int,
        first_order: int,
    ) -> ChunkWork[ChunkReadPartition]:
        """The partitions of a logged batch again, from its start and end states (driver)."""
        ready = reads_of_logged_batch(
            start, end, self.directory, load_read, checkpoint, "a new checkpointLocation and slot"
        )
        gone_reads = {c.read for c, _ in ready if c.rebuild is not None}
        closable = {r for r in gone_reads if end.closes(r)}
        emits, _, emitted, _ = self._emits(
            ready, position, first_order, closable, end, check_racing=False
        )
        reads = [self._read(c) for c in end.pending if c.read_in == checkpoint]
        return ChunkWork(end, emits, reads, emitted, position)

    def _emits(
        self,
        ready: list[tuple[PendingChunk, ChunkRead]],
        position: int,
        first_order: int,
        closable: set[tuple[str, int | None]],
        queue: IncrementalState,
        check_racing: bool = True,
    ) -> tuple[list[ChunkEmitPartition], list[PendingChunk], list[PendingChunk], int]:
        """The partitions emitting ``ready`` chunks (or reading them again), in unit order.

        A rebuild in ``closable`` whose chunks all emit here ends with its last chunk's unit,
        which carries the ``rebuild='end'`` row (a unit of that row alone when it is empty).
        Chunks of a read that ``queue`` (the batch's state, with the rebuilds it queued)
        supersedes are dropped.
        """
        if not ready:
            return [], [], [], 0
        since = min(chunk.since for chunk, _ in ready)
        changes = self.window(since, position)
        rereads: list[PendingChunk] = []
        emitting: list[tuple[PendingChunk, ChunkRead, frozenset[str], int]] = []
        for chunk, read in ready:
            # Each chunk's own window, from its own start: a batch re-run after a restart
            # reads the window from another start (the chunks it emits may differ from those
            # that were ready), and must leave out the same keys.
            own = [c for c in changes if c[0] > chunk.since]
            table_name = chunk.bounds.table
            mine = [(xid, key, old) for _, xid, table, key, old in own if table == table_name]
            if check_racing and not set(read.racing) <= {c[1] for c in own}:
                # A transaction committed before the window yet unseen by the read (a stalled
                # synchronous commit): the window cannot say what it changed. Read again.
                rereads.append(chunk)
                continue
            dropped = dropped_keys(read.snapshot, mine)
            rows_file = chunk_files(self.directory, chunk)[0]
            size = int(kept(spilled_keys(rows_file), dropped).true_count)
            if queue.superseded(chunk.read, len(self.tables)):
                size = 0  # done with, emitting nothing
            emitting.append((chunk, read, dropped, size))
        closable = {r for r in closable if not queue.superseded(r, len(self.tables))}
        closed = closable - {c.read for c in rereads}
        last: dict[tuple[str, int | None], int] = {}
        for chunk, _, _, _ in emitting:
            if chunk.read in closed and chunk.bounds.index >= last.get(chunk.read, -1):
                last[chunk.read] = chunk.bounds.index
        emits: list[ChunkEmitPartition] = []
        for chunk, read, dropped, size in emitting:
            table = self._table(chunk.read)
            closing = None
            if last.get(chunk.read) == chunk.bounds.index:
                closing = _rebuild_end(table)
            elif size == 0:
                continue
            emits.append(
                ChunkEmitPartition(
                    self.source,
                    chunk_files(self.directory, chunk)[0],
                    dropped,
                    size,
                    f"snapshot:{self.slot}:{chunk.name}",
                    first_order + len(emits),
                    read.read_at_us,
                    table.name,
                    types_json(table.columns) if self.column_types else None,
                    closing,
                )
            )
        emitted = [chunk for chunk, _, _, _ in emitting]
        return emits, rereads, emitted, sum(size for _, _, _, size in emitting)

    def _plan_reads(
        self, state: IncrementalState, start_lsn: int, checkpoint: int
    ) -> IncrementalState:
        """Plan new chunks until ``parallelism`` are pending or every table is planned."""
        pending = list(state.pending)
        while len(pending) < self.parallelism and not state.planning_done(len(self.tables)):
            read = self._sequence(state, state.table)
            if state.superseded(read, len(self.tables)):
                state = replace(state, table=state.table + 1, after=None, index=0)
                continue
            table = self._table(read)
            bounds = next_chunk(self.connection(), table, state.index, state.after, self.chunk_rows)
            pending.append(PendingChunk(bounds, start_lsn, checkpoint, read[1]))
            if bounds.upto is None:  # the table's last chunk
                state = replace(state, table=state.table + 1, after=None, index=0)
            else:
                state = replace(state, after=bounds.upto, index=state.index + 1)
        return replace(state, pending=tuple(pending))

    def _read(self, chunk: PendingChunk) -> ChunkReadPartition:
        return ChunkReadPartition(self.dsn, self._table(chunk.read), chunk, self.directory)

    def discard(self, chunks: Sequence[PendingChunk]) -> None:
        """Delete emitted chunks' files (driver, once their batch committed)."""
        discard_chunks(self.directory, chunks)


def _rebuild_end(table: TableInfo) -> tuple[str | None, str]:
    """The ``before`` and ``after`` texts of the row ending the rebuild of ``table``."""
    schema = relation_schema(table.columns, table.key_in_column_order)
    event = SchemaEvent(table.name, schema, schema, (), "end")
    return event.before_json(), event.after_json()
