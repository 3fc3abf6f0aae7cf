"""The driver's side of the mysql connector's ``snapshot=incremental``.

The connector streams transactions from the binlog; this object adds the snapshot's chunk work
to its batches (:mod:`.incremental_plan` decides which chunks to read and emit), reads a
chunk's window of changes again from the binlog, remembers the chunks each planned batch emits
until Spark commits it (their spill files go then), and reports progress. One per connector;
runs on the driver. Chunks are read by executor tasks, ``snapshotParallelism`` at a time, as
the postgres connector's are.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from spark_ckpt.errors import DataLossError
from spark_ckpt.state.storage import Location

from ..chunk_work import ChunkWork
from ..chunks import ChunkBounds, IncrementalState, Key, PendingChunk
from ..connector import PlannedBatch
from ..snapshot_progress import SnapshotProgress
from .binlog import read_transactions
from .binlog_offset import BinlogOffset, BinlogPosition
from .catalog import estimated_rows, table_columns
from .chunks import ChunkReadPartition, next_chunk
from .incremental_plan import ChunkPlanner, Window, WindowChange
from .schemas import ColumnsSignature, SchemaTracker, columns_signature, schema_signature
from .server import connect, connection_settings
from .stored_rows import OLD_KEY
from .transactions import BinlogTransaction, TransactionAssembler
from .types import types_json

if TYPE_CHECKING:
    from spark_ckpt.model.schema_changes import TableSchema

    from ..change_store import ChangeStore
    from .options import MySqlOptions

__all__ = ["IncrementalSnapshot", "check_windows_kept"]

_log = logging.getLogger(__name__)

StreamPartitions = Callable[[list[BinlogTransaction], int], list[object]]
"""The connector's partitions of transactions, the first of them ``emitted`` in its order."""


class IncrementalSnapshot:
    """Chunk work for the batches of one ``mysql`` connector (driver).

    Parameters
    ----------
    options
        The connector's options (the server, the tables, the chunk size and parallelism).
    keys
        Each captured table's primary key columns.
    source
        The output's ``source`` value.
    directory
        Where the chunks spill their rows (``<snapshotDir>/chunks``).
    column_types
        Add ``column_types`` to emitted rows.
    tracker
        A schema tracker for reading a window of the binlog again.
    store
        A change store for one read of a window (the connector's kind).
    server
        The server's identity, recorded in the offsets the snapshot's batches end at.
    """

    def __init__(
        self,
        options: MySqlOptions,
        keys: dict[str, tuple[str, ...]],
        source: str,
        directory: Location,
        column_types: bool,
        tracker: Callable[[], SchemaTracker],
        store: Callable[[], ChangeStore],
        server: str | None,
    ) -> None:
        self.options = options
        self.server = server
        self.keys = keys
        self.directory = directory
        self._tracker = tracker
        self._store = store
        self._types: dict[str, str] = {}  # per table, as first emitted by this run
        self._emitted: dict[str, list[PendingChunk]] = {}  # by end position, until commit
        self._rows_estimated: int | None = None
        self._cleared = False
        self._like: BinlogPosition | None = None  # a position of the binlog, for file names
        self.planner = ChunkPlanner(
            source,
            options.tables,
            directory,
            options.snapshot_chunk_rows,
            options.snapshot_parallelism,
            self._next_chunk,
            self._window,
            self._read_partition,
            self._column_types if column_types else None,
            self._catalog_columns,
        )

    # -- the planner's callbacks (driver) ------------------------------------------------------

    def _next_chunk(self, table: str, index: int, after: Key | None, rows: int) -> ChunkBounds:
        with connect(self.options) as conn:
            return next_chunk(conn, table, self.keys[table], index, after, rows)

    def _column_types(self, table: str) -> str:
        if table not in self._types:
            with connect(self.options) as conn:
                self._types[table] = types_json(table_columns(conn, table))
        return self._types[table]

    def _read_partition(self, chunk: PendingChunk) -> ChunkReadPartition:
        settings = connection_settings(self.options)
        return ChunkReadPartition(settings, self.keys[chunk.bounds.table], chunk, self.directory)

    def _window(self, since: int, upto: int) -> Window:
        """The captured changes of transactions ending in ``(since, upto]`` (binlog re-read).

        A schema change of a captured table is one too, with no key. The tracker starts from
        the schemas of the batch's start (at or before ``upto``), so its schemas after the last
        transaction in the window are the stream's at ``upto``.
        """
        like = self._like
        assert like is not None, "windows are read while a batch is planned"
        start = BinlogPosition.from_ordinal(since, like)
        stop = BinlogPosition.from_ordinal(upto, like)
        tracker = self._tracker()
        found: list[WindowChange] = []
        at_end = tracker.state.tables
        if since >= upto:
            return Window(found, _signatures(at_end))
        store = self._store()
        try:
            for txn in read_transactions(
                self.options,
                connection_settings(self.options),
                start,
                TransactionAssembler(self.keys, store),
                tracker,
                stop,
            ):
                if not isinstance(txn, BinlogTransaction) or txn.end.ordinal > upto:
                    continue  # a statement (DDL), or past the window
                at_end = tracker.committed.tables
                for change in txn.rows():
                    table = str(change["table"])
                    if change["op"] == "s":
                        # The table's chunks read before it are read again; its columns' types
                        # as emitted rows carry them are looked up again.
                        found.append((txn.end.ordinal, table, None, None))
                        self._types.pop(table, None)
                    else:
                        found.append((txn.end.ordinal, table, change["key"], change[OLD_KEY]))
        finally:
            store.discard()
        return Window(found, _signatures(at_end))

    def _catalog_columns(self, table: str) -> ColumnsSignature:
        with connect(self.options) as conn:
            return columns_signature(table_columns(conn, table))

    # -- batches (driver) ----------------------------------------------------------------------

    def batch(
        self,
        start: BinlogOffset,
        taken: list[BinlogTransaction],
        reach: tuple[BinlogPosition, str | None] | None,
        checkpoint: int,
        stream_partitions: StreamPartitions,
    ) -> PlannedBatch | None:
        """The batch with ``taken`` transactions and the snapshot's chunk work (per batch).

        Chunks are emitted after the transactions, at the end of the stream part or further,
        up to ``reach`` (where the binlog was read to and the GTID state there, when the batch
        takes every transaction read): a chunk waits until the binlog has been read past its
        high watermark. None when there is nothing to read or emit yet.
        """
        assert start.incremental is not None
        self._like = start.at
        stream_end = taken[-1].end if taken else start.at
        far = stream_end if reach is None else max(stream_end, reach[0])
        emitted = start.emitted + len(taken)
        work = self.planner.plan(
            start.incremental,
            start.at.ordinal,
            stream_end.ordinal,
            far.ordinal,
            checkpoint,
            emitted,
        )
        if not taken and not work.emitted and work.state == start.incremental:
            return None  # nothing to read or emit yet
        end = self._end(start, taken, work, checkpoint, None if reach is None else reach[1])
        self._emitted[_key(end)] = work.emitted
        if work.emitted:
            _log.info("mysql incremental snapshot: %s", self.progress(work.state).summary)
        stream = stream_partitions(taken, start.emitted) if taken else []
        commit = taken[-1].commit_ts_us // 1000 if taken else None
        return PlannedBatch(end.to_json(), [*stream, *work.partitions], commit)

    def _end(
        self,
        start: BinlogOffset,
        taken: list[BinlogTransaction],
        work: ChunkWork[object],
        checkpoint: int,
        reach_gtid: str | None,
    ) -> BinlogOffset:
        last = taken[-1] if taken else None
        at = last.end if last is not None else start.at
        gtid = (last.gtid_state if last is not None else None) or start.gtid
        placed = BinlogPosition.from_ordinal(work.position, start.at) if work.emitted else at
        if placed > at:
            # Past the last transaction taken, only uncaptured ones: the GTID state must cover
            # them, or a resume by GTID (a failover) would ask for them again.
            at, gtid = placed, reach_gtid or gtid
        finished = work.state.finished(len(self.options.tables))
        return BinlogOffset(
            checkpoint,
            start.emitted + len(taken) + len(work.emits),
            at,
            gtid,
            (last.schemas if last is not None else None) or start.schemas,
            self.server,
            None if finished else work.state,
        )

    def replan(
        self,
        first: BinlogOffset,
        last: BinlogOffset,
        replay: Callable[[int], list[BinlogTransaction]],
        stream_partitions: StreamPartitions,
    ) -> list[object]:
        """A logged batch of the snapshot again, after a restart: its transactions and chunks.

        ``replay(n)`` reads the batch's ``n`` transactions again.
        """
        assert first.incremental is not None
        self._like = first.at
        tables = len(self.options.tables)
        final = last.incremental or IncrementalState(table=tables)
        work = self.planner.replan(first.incremental, final, last.at.ordinal, last.checkpoint, 0)
        streamed = last.emitted - first.emitted - len(work.emits)
        txns = replay(streamed) if streamed else []
        emits = [
            dataclasses.replace(e, txn_order=first.emitted + streamed + i)
            for i, e in enumerate(work.emits)
        ]
        self._emitted[_key(last)] = work.emitted
        stream = stream_partitions(txns, first.emitted) if txns else []
        return [*stream, *emits, *work.reads]

    def committed(self, end: BinlogOffset) -> None:
        """Spark committed ``end``: delete its emitted chunks' files (once per batch).

        Once the snapshot is finished, what killed runs left of it goes too.
        """
        emitted = self._emitted.pop(_key(end), [])
        if emitted:
            self.planner.discard(emitted)
        if end.incremental is None and not self._cleared:
            self.directory.delete_tree()
            self._cleared = True

    def progress(self, state: IncrementalState) -> SnapshotProgress:
        """The snapshot's progress (per trigger; one row estimate per run)."""
        tables = self.options.tables
        if self._rows_estimated is None:
            with connect(self.options) as conn:
                self._rows_estimated = estimated_rows(conn, tables) or 0
        busy = {c.bounds.table for c in state.pending}
        current = tables[state.table] if state.table < len(tables) else None
        done = [t for i, t in enumerate(tables) if i < state.table and t not in busy]
        return SnapshotProgress(
            len(tables),
            len(done),
            state.rows_done,
            self._rows_estimated or None,
            current or (min(busy) if busy else None),
            state.chunks_done,
            len(state.pending),
        )


def _key(offset: BinlogOffset) -> str:
    return f"{offset.checkpoint}:{offset.position}"


def _signatures(tables: Mapping[str, TableSchema]) -> dict[str, ColumnsSignature]:
    return {table: schema_signature(schema) for table, schema in tables.items()}


def check_windows_kept(restored: BinlogOffset, files: list[str]) -> None:
    """Fail now if the binlog of a pending chunk's window was purged (driver, at a restart).

    A chunk read and not emitted yet is emitted once the stream has been read again from the
    start of its window, which may be in a file older than the offset's own; without
    this check the restart would fail only at that read, with a connection error.

    Raises
    ------
    DataLossError
        When the file the earliest window starts in is not among the server's ``files``.
    """
    state, at = restored.incremental, restored.position
    floor = state.floor() if state is not None else None
    if state is None or floor is None or at is None:
        return
    window = BinlogPosition.from_ordinal(floor, like=at)
    if window.file in files:
        return
    raise DataLossError(
        f"the checkpoint is in the middle of a chunked snapshot (snapshot=incremental) with "
        f"{len(state.pending)} chunks read and not emitted yet, whose window of binlog changes "
        f"starts at {window}, but the server no longer has {window.file} (it has "
        f"{files[0] if files else 'none'} to {files[-1] if files else 'none'}): those changes "
        f"were purged (binlog_expire_logs_seconds, PURGE BINARY LOGS) before the chunks could "
        f"be reconciled with them. Start over with a new checkpointLocation, and keep binlogs "
        f"longer than the query may be stopped"
    )
