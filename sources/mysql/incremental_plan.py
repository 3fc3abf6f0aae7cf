"""Which chunks a batch of ``snapshot=incremental`` reads and emits (driver, per batch).

The mysql connector streams the binlog from the query's first start; the tables' existing rows
come in primary-key chunks beside it (Netflix's DBLog; Flink CDC's and Debezium's incremental
snapshots), in the postgres connector's shape:

1. In batch M the driver plans up to ``snapshotParallelism`` chunks (:func:`.chunks.next_chunk`)
   and adds one *read* partition per chunk: an executor reads it without a lock and spills its
   rows with its binlog watermarks (:class:`~.chunks.ChunkRead`). Such a partition yields no rows.
2. In a later batch N, once the binlog has been read past a chunk's high watermark, the chunk is
   *emitted*: its rows become one unit (``op='r'``) placed after the batch's transactions, at a
   binlog position P at or past the high watermark, without the keys that a transaction of its
   window (from its low watermark, or its batch's start if earlier, to P) changed
   (:func:`~spark_ckpt.sources.chunks.window_dropped`): the stream carries those keys' states.
   The rows left equal the table at P. A chunk whose rows do not have the columns the stream
   has for its table at P is not emitted but read again: its table's schema changed in its
   window (an ``ALTER TABLE`` between its read and P, as the window's row events show it), or
   its read recorded columns (:attr:`.chunks.ChunkRead.columns`) other than both the stream's at
   P and the catalog's now (a change the stream followed before the placing batch, whose rows
   the window, decoded with the schemas as of that batch's start, cannot tell from later ones).
   A chunk read after a change that no row event has shown yet has the catalog's columns, and is
   placed: the stream's schema change comes with the table's next row event.

Every step is in the offsets (:class:`~spark_ckpt.sources.chunks.IncrementalState`, positions as
:attr:`~.binlog_offset.BinlogPosition.ordinal`), so a restart re-reads no emitted chunk: only the
chunks of the batch that was running. The windows are read again from the binlog, so a batch run
again after a restart emits the same rows. Pure planning: the database is behind callbacks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from spark_ckpt.state.storage import Location

from ..chunk_spill import ChunkEmitPartition, chunk_files, kept, spilled_keys
from ..chunk_work import ChunkWork, discard_chunks, reads_of_logged_batch
from ..chunks import ChunkBounds, IncrementalState, Key, PendingChunk, window_dropped
from .chunks import ChunkRead, load_read
from .schemas import ColumnsSignature

__all__ = ["ChunkPlanner", "Window", "WindowChange"]

WindowChange = tuple[int, str, str | None, str | None]
"""``(commit end ordinal, table, key text, old key text)`` of one change in the stream; a key
of None: the table's schema changed there (a DDL statement)."""


@dataclass(frozen=True)
class Window:
    """The stream's changes in a window of the binlog, read again.

    Attributes
    ----------
    changes
        Of the transactions ending in the window, in order.
    columns
        Each captured table's columns in the stream at the window's end, as far as known.
    """

    changes: list[WindowChange]
    columns: Mapping[str, ColumnsSignature] = field(default_factory=dict)


class ChunkPlanner:
    """Plans chunk reads and emissions (driver).

    Parameters
    ----------
    source
        The output's ``source`` value.
    tables
        The captured tables, in the order they are read.
    directory
        Where chunks are spilled.
    chunk_rows, parallelism
        Rows per chunk; chunks pending at once.
    bounds
        ``(table, index, after, rows) -> bounds``: the next chunk (:func:`.chunks.next_chunk`).
    window
        ``(since, upto) -> window``: the stream's changes of transactions ending in
        ``(since, upto]``, read again from the binlog, and its schemas at ``upto``.
    read_partition
        A chunk's read partition.
    column_types
        A table's ``column_types`` text for its emitted rows (None: no such column).
    catalog_columns
        A table's columns as the server's catalog has them now (None: chunks are not compared
        with the catalog, and are placed where their columns differ from the stream's).
    """

    def __init__(
        self,
        source: str,
        tables: Sequence[str],
        directory: Location,
        chunk_rows: int,
        parallelism: int,
        bounds: Callable[[str, int, Key | None, int], ChunkBounds],
        window: Callable[[int, int], Window],
        read_partition: Callable[[PendingChunk], object],
        column_types: Callable[[str], str] | None = None,
        catalog_columns: Callable[[str], ColumnsSignature] | None = None,
    ) -> None:
        self.source = source
        self.tables = list(tables)
        self.directory = directory
        self.chunk_rows = chunk_rows
        self.parallelism = parallelism
        self._bounds = bounds
        self._window = window
        self._read_partition = read_partition
        self._column_types = column_types
        self._catalog_columns = catalog_columns

    def plan(
        self,
        state: IncrementalState,
        since: int,
        stream_end: int,
        reach: int,
        checkpoint: int,
        first_order: int,
    ) -> ChunkWork[object]:
        """A new batch's snapshot work (driver, per batch).

        Parameters
        ----------
        since
            The batch's start position.
        stream_end
            The end of the batch's last transaction (its start when it has none).
        reach
            How far the binlog is known to hold nothing more for the batch (``>=
            stream_end``): where the last read ended, when the batch takes every transaction.
        checkpoint, first_order
            The batch's checkpoint; the ``txn_order`` of its first emitted chunk.
        """
        reads = {c: load_read(self.directory, c) for c in state.pending}
        ready = [(c, r) for c, r in reads.items() if r is not None and r.high <= reach]
        position = max([stream_end, *(read.high for _, read in ready)])
        emits, altered, emitted, rows = self._emits(ready, position, first_order)
        # A chunk whose read left nothing (its spill was lost) is read again.
        lost = [c for c, read in reads.items() if read is None]
        state = state.after_emits(emitted, rows, lost, since, checkpoint)
        if altered:
            # Read again from past the last schema change in their windows, so that their
            # next windows hold it no more.
            state = state.after_emits(
                (), 0, [c for c, _ in altered], max(at for _, at in altered), checkpoint
            )
        state = self._plan_reads(state, since, checkpoint)
        to_read = [self._read_partition(c) for c in state.pending if c.read_in == checkpoint]
        return ChunkWork(state, emits, to_read, emitted, position)

    def replan(
        self,
        start: IncrementalState,
        end: IncrementalState,
        position: int,
        checkpoint: int,
        first_order: int,
    ) -> ChunkWork[object]:
        """The partitions of a logged batch again, from its start and end states (driver)."""
        ready = reads_of_logged_batch(
            start, end, self.directory, load_read, checkpoint, "a new checkpointLocation"
        )
        # The logged end state says which chunks emitted: none is read again here.
        emits, _, emitted, _ = self._emits(ready, position, first_order, check_schema=False)
        reads = [self._read_partition(c) for c in end.pending if c.read_in == checkpoint]
        return ChunkWork(end, emits, reads, emitted, position)

    def _emits(
        self,
        ready: list[tuple[PendingChunk, ChunkRead]],
        position: int,
        first_order: int,
        check_schema: bool = True,
    ) -> tuple[list[ChunkEmitPartition], list[tuple[PendingChunk, int]], list[PendingChunk], int]:
        """The partitions emitting ``ready`` chunks placed at ``position``, in unit order.

        Also the chunks to read again (when ``check_schema``), each with where its next read's
        window starts (past the last schema change of its table in its window), the chunks
        emitted, and their rows.
        """
        if not ready:
            return [], [], [], 0
        starts = {chunk: min(chunk.since, read.low) for chunk, read in ready}
        window = self._window(min(starts.values()), position)
        changes = window.changes
        emits: list[ChunkEmitPartition] = []
        rereads: list[tuple[PendingChunk, int]] = []
        emitted: list[PendingChunk] = []
        rows = 0
        for chunk, read in ready:
            # Each chunk's own window, from its own start: a batch run again after a restart
            # must leave out the same keys whatever else it emits.
            table = chunk.bounds.table
            own = [
                (at, k, old) for at, name, k, old in changes if name == table and at > starts[chunk]
            ]
            altered = [at for at, key, _ in own if key is None]
            if check_schema and altered:
                rereads.append((chunk, max(altered)))
                continue
            if check_schema and self._stale(table, read, window.columns):
                rereads.append((chunk, position))
                continue
            emitted.append(chunk)
            dropped = window_dropped((key, old) for _, key, old in own if key is not None)
            rows_file = chunk_files(self.directory, chunk)[0]
            size = int(kept(spilled_keys(rows_file), dropped).true_count)
            rows += size
            if size == 0:
                continue
            emits.append(
                ChunkEmitPartition(
                    self.source,
                    rows_file,
                    dropped,
                    size,
                    f"snapshot:{chunk.name}",
                    first_order + len(emits),
                    read.read_at_us,
                    table,
                    None if self._column_types is None else self._column_types(table),
                )
            )
        return emits, rereads, emitted, rows

    def _stale(self, table: str, read: ChunkRead, placed: Mapping[str, ColumnsSignature]) -> bool:
        """Whether a chunk's rows have columns of before a change the stream has followed at P.

        Its columns differ from the stream's at P and from the catalog's now (asked only then):
        a read after a change no row event has shown yet has the catalog's columns, and is not
        read again (it would be, at every batch, until the table's next row event).
        """
        stream = placed.get(table)
        if read.columns is None or stream is None or read.columns == stream:
            return False
        return self._catalog_columns is not None and read.columns != self._catalog_columns(table)

    def _plan_reads(self, state: IncrementalState, since: int, checkpoint: int) -> IncrementalState:
        """Plan new chunks until ``parallelism`` are pending or every table is planned."""
        pending = list(state.pending)
        while len(pending) < self.parallelism and not state.planning_done(len(self.tables)):
            table = self.tables[state.table]
            bounds = self._bounds(table, state.index, state.after, self.chunk_rows)
            pending.append(PendingChunk(bounds, since, checkpoint))
            if bounds.upto is None:  # the table's last chunk
                state = replace(state, table=state.table + 1, after=None, index=0)
            else:
                state = replace(state, after=bounds.upto, index=state.index + 1)
        return replace(state, pending=tuple(pending))

    def discard(self, chunks: Sequence[PendingChunk]) -> None:
        """Delete emitted chunks' files (driver, once their batch committed)."""
        discard_chunks(self.directory, chunks)
