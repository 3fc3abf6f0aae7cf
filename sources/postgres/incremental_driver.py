"""The driver's side of ``snapshot=incremental``: chunks planned into batches, committed, shown.

The connector streams transactions; this object adds the snapshot's chunk work to its batches
(:mod:`.incremental_plan` decides which chunks to read and emit), remembers the chunks each
planned batch emits until Spark commits it (their spill files go then), and reports progress.
One per connector; runs on the driver. The chunk planner (it holds connections) is rebuilt on
first use after unpickling.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from spark_ckpt.state.storage import Location

from ..connector import PlannedBatch
from ..snapshot_progress import SnapshotProgress
from .decoding.transactions import PgTransaction
from .incremental import IncrementalState, PendingChunk
from .incremental_plan import ChunkPlanner
from .lsn import format_lsn
from .pg_offset import PgOffset, offset_key
from .snapshot import estimated_rows
from .tables import TableInfo

__all__ = ["FLUSH_WAIT_S", "IncrementalSnapshot"]

_log = logging.getLogger(__name__)

FLUSH_WAIT_S = 60.0
"""How long a bounded run waits for read chunks' watermarks to be flushed (the WAL writer
flushes within ``3 * wal_writer_delay``, at most 10 s)."""

StreamPartitions = Callable[[list[PgTransaction], int], list[object]]
"""The connector's partitions of transactions, the first of them ``emitted`` in its order."""


class IncrementalSnapshot:
    """Chunk work for the batches of one ``postgres`` connector (driver).

    Parameters
    ----------
    slot
        The slot's name, for messages.
    directory
        Where the chunks spill their rows (``<snapshotDir>/chunks``).
    planner
        Builds the chunk planner (on first use; again after unpickling).
    tables
        The captured tables, described (the connector describes them on first call).
    """

    def __init__(
        self,
        slot: str,
        directory: Location,
        planner: Callable[[], ChunkPlanner],
        tables: Callable[[], list[TableInfo]],
    ) -> None:
        self.slot = slot
        self.directory = directory
        self._new_planner = planner
        self._tables = tables
        self._planner: ChunkPlanner | None = None
        self._emitted: dict[str, list[PendingChunk]] = {}  # by end offset, until commit
        self._rows_estimated: int | None = None
        self._cleared = False  # the finished snapshot's spill is gone

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_planner": None}  # it holds connections

    @property
    def planner(self) -> ChunkPlanner:
        """The chunk planner (built on first use)."""
        if self._planner is None:
            self._planner = self._new_planner()
        return self._planner

    def flushed_past(self, state: IncrementalState, flush_lsn: Callable[[], int]) -> int:
        """The flushed WAL position, once past the read chunks' watermarks (per trigger).

        For a bounded run only, which ends at the first trigger that offers nothing, so it
        must not ask while a read chunk waits for its watermark to be flushed. An asynchronous
        commit is flushed by the WAL writer within ``3 * wal_writer_delay``, any synchronous
        commit flushes everything before it; only the WAL of a transaction left open on a
        server where nothing commits stays unflushed (a warning, after a minute).
        """
        needed = self.planner.watermark(state)
        flushed = flush_lsn()
        deadline = time.monotonic() + FLUSH_WAIT_S
        while needed is not None and flushed < needed and time.monotonic() < deadline:
            time.sleep(0.05)
            flushed = flush_lsn()
        if needed is not None and flushed < needed:
            _log.warning(
                "postgres slot %s: the WAL is flushed up to %s only, short of a snapshot chunk's "
                "high watermark %s after %.0f s; this bounded run may end before the snapshot",
                self.slot,
                format_lsn(flushed),
                format_lsn(needed),
                FLUSH_WAIT_S,
            )
        return flushed

    def batch(
        self,
        start: PgOffset,
        lsn: int,
        taken: list[PgTransaction],
        reach: int | None,
        stream_partitions: StreamPartitions,
    ) -> PlannedBatch | None:
        """The batch with ``taken`` transactions and the snapshot's chunk work (per batch).

        Chunks are emitted after the transactions, at the end of the stream part, or further,
        up to ``reach`` (where the last peek found nothing more, when the batch takes every
        transaction read): a chunk waits until the stream has been read past its high
        watermark. None when there is nothing to read or emit yet.
        """
        assert start.incremental is not None
        stream_end = taken[-1].end_lsn if taken else lsn
        reach = stream_end if reach is None else max(stream_end, reach)
        checkpoint = start.checkpoint + 1
        work = self.planner.plan(
            start.incremental, lsn, stream_end, reach, checkpoint, start.emitted + len(taken)
        )
        if not taken and not work.emitted and work.state == start.incremental:
            return None  # nothing to read or emit yet
        tables = self._tables()
        state = None if work.state.finished(len(tables)) else work.state
        end_lsn = work.position if work.emitted else stream_end
        schemas = (taken[-1].schemas if taken else None) or start.schemas
        end = PgOffset(
            checkpoint,
            start.emitted + len(taken) + len(work.emits),
            "stream",
            end_lsn,
            state,
            schemas,
        )
        self._emitted[offset_key(end.to_json())] = work.emitted
        if work.emitted:
            _log.info(
                "postgres incremental snapshot of slot %s: %s",
                self.slot,
                self.progress(work.state, tables).summary,
            )
        stream = stream_partitions(taken, start.emitted) if taken else []
        return PlannedBatch(end.to_json(), [*stream, *work.partitions])

    def replan(
        self,
        first: PgOffset,
        last: PgOffset,
        end: dict[str, Any],
        replay: Callable[[int], list[PgTransaction]],
        stream_partitions: StreamPartitions,
    ) -> list[object]:
        """A logged batch of the snapshot again, after a restart: its transactions and chunks.

        ``replay(n)`` peeks the batch's ``n`` transactions again.
        """
        assert last.lsn is not None
        tables = len(self._tables())
        # No start state: the batch began a rebuild. No end state: the batch finished all.
        initial = first.incremental or IncrementalState(table=tables)
        final = last.incremental or IncrementalState(
            table=tables + len(initial.rebuild), rebuild=initial.rebuild
        )
        work = self.planner.replan(initial, final, last.lsn, last.checkpoint, 0)
        streamed = last.emitted - first.emitted - len(work.emits)
        txns = replay(streamed) if streamed else []
        emits = [
            dataclasses.replace(e, txn_order=first.emitted + streamed + i)
            for i, e in enumerate(work.emits)
        ]
        self._emitted[offset_key(end)] = work.emitted
        stream = stream_partitions(txns, first.emitted) if txns else []
        return [*stream, *emits, *work.reads]

    def committed(self, end: dict[str, Any], finished: bool) -> None:
        """Spark committed ``end``: delete its emitted chunks' files (once per batch).

        Once the snapshot is ``finished``, what killed runs left of it goes too.
        """
        emitted = self._emitted.pop(offset_key(end), [])
        if emitted:
            self.planner.discard(emitted)
        if finished and not self._cleared:
            self.directory.delete_tree()  # leftovers of killed runs
            self._cleared = True

    def progress(self, state: IncrementalState, tables: list[TableInfo]) -> SnapshotProgress:
        """The snapshot's progress over ``tables`` (per trigger; one row estimate per run).

        Tables read again after a schema change count as tables of their own, after the
        captured ones; the row estimate is the captured tables'.
        """
        if self._rows_estimated is None and tables:
            self._rows_estimated = estimated_rows(self.planner.connection(), tables) or 0
        busy = {c.read for c in state.pending}
        sequence: list[tuple[str, int | None]] = [(t.name, None) for t in tables]
        sequence += [(name, len(tables) + i) for i, name in enumerate(state.rebuild)]
        current = sequence[state.table][0] if state.table < len(sequence) else None
        done = [read for i, read in enumerate(sequence) if i < state.table and read not in busy]
        return SnapshotProgress(
            len(sequence),
            len(done),
            state.rows_done,
            self._rows_estimated or None,
            current or (min(name for name, _ in busy) if busy else None),
            state.chunks_done,
            len(state.pending),
        )
