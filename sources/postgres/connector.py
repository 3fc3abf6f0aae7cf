"""The ``postgres`` connector: PostgreSQL logical decoding (wal2json or pgoutput) through a slot.

Offsets (:class:`~.pg_offset.PgOffset`) hold the phase (snapshot or stream), the end LSN of the
last emitted transaction, and the incremental snapshot's chunks while it runs.

Reading is replayable because changes are only *peeked*: the slot is confirmed
(``pg_replication_slot_advance``) in :meth:`PostgresConnector.commit`, when Spark has committed
the offset. Peeked changes are kept in the reader process as compressed chunks, spilled beyond a
bound (:mod:`..change_store`), and handed to executors inside the partitions, so each change is
decoded about once; a re-run after a restart peeks the logged range again. Transactions are whole
units: a cut is always available between them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.ipc

from spark_ckpt.errors import (
    ReplicationSlotError,
    RestoreError,
)
from spark_ckpt.model.availability import AVAILABLE, SnapshotAvailability
from spark_ckpt.state.storage import Location

from ..change_store import ChangeStore
from ..connector import ChangeConnector, Plan, PlannedBatch
from ..gate import Cut
from ..options import SourceOptions
from ..snapshot_spill import SnapshotPartition, snapshot_rows
from .chunks import require_key
from .connect import redact_dsn, scrub
from .decoding.transactions import PgTransaction
from .incremental import (
    ChunkEmitPartition,
    ChunkReadPartition,
    IncrementalState,
    emit_rows,
    run_chunk_read,
)
from .incremental_driver import IncrementalSnapshot
from .incremental_plan import ChunkPlanner
from .initial_snapshot import InitialSnapshot
from .lsn import format_lsn, parse_lsn
from .options import PostgresOptions
from .pg_offset import PgOffset
from .publication import ensure_publication
from .slot import SLOT_HEALTH_KEYS, Slot, SlotHealth
from .slot_checks import check_resume, claim_snapshot_slot
from .snapshot import SnapshotSpill
from .stream_partitions import (
    PgStreamPartition,
    plan_stream_partitions,
    stream_rows,
)
from .stream_reader import StreamReader
from .tables import TableInfo, describe_tables

__all__ = ["PostgresConnector", "build"]

_log = logging.getLogger(__name__)
_READ_AHEAD_MIN = 20_000  # peek at least this many rows ahead, to serve several small batches


class PostgresConnector(ChangeConnector):
    """Reads committed transactions of the captured tables from a logical replication slot.

    Built on the driver by :func:`build`, once per query run; executors get a pickled copy
    without connections.

    Parameters
    ----------
    options
        The connector's options (:class:`.options.PostgresOptions`), as parsed.
    changes_per_partition
        Changes per Spark input partition (``changesPerPartition``).
    spill
        Where the snapshot and the stream spill (``snapshotDir``, reached with the source's
        storage settings); None: a directory under the system temp dir.
    column_types
        Add the ``column_types`` column (each image's column types, :mod:`.types`).
    """

    name = "postgres"

    def __init__(
        self,
        options: PostgresOptions,
        changes_per_partition: int,
        spill: Location | None = None,
        column_types: bool = False,
    ) -> None:
        self.options = options
        self.dsn = options.dsn
        slot = options.slot
        self.publication = options.publication or f"spark_ckpt_{slot}"
        self.column_types = column_types
        self.changes_per_partition = changes_per_partition
        digest = hashlib.sha256(f"{redact_dsn(self.dsn)}|{slot}".encode()).hexdigest()[:12]
        default = os.path.join(tempfile.gettempdir(), "spark-ckpt-postgres", f"{slot}-{digest}")
        self.spill = SnapshotSpill(spill or Location(default))
        self.source = f"postgres:{slot}"
        self._slot: Slot | None = None
        self._tables: list[TableInfo] = []
        # The initial snapshot phase (driver only: executors get None).
        self._snapshot: InitialSnapshot | None = InitialSnapshot(
            options,
            lambda: self.slot,
            self.spill,
            self._described,
            self.source,
            changes_per_partition,
            column_types,
        )
        self._cache: list[PgTransaction] = []  # decoded transactions after the last start
        self._store: ChangeStore | None = None  # the changes of the cached transactions
        self._retired: list[ChangeStore] = []  # earlier peeks' changes: gone at the next commit
        self._complete_lsn: int | None = None  # the last peek read all the server had up to here
        self._incremental = IncrementalSnapshot(
            slot, self.spill.directory.child("chunks"), self._new_chunk_planner, self._described
        )
        self._cache_complete_to: int | None = None  # the server had nothing more up to here
        self._target: int | None = None  # Trigger.availableNow: stop at this LSN
        self._planning: PgOffset | None = None  # the start offset of the last plan()
        self._snapshot_unit = False  # the last plan() offered the snapshot as its one unit
        self._health: SlotHealth | None = None  # the slot as of the last plan()
        self._lag_seconds: float | None = None
        self._moved_at = time.monotonic()  # when the last batch moved the position
        self._heartbeat_broken = False  # the server refused a heartbeat: not tried again
        # The stream's decoding, schemas and catalogs (driver only: executors get None).
        self._stream: StreamReader | None = StreamReader(
            options, lambda: self.slot, self.spill, lambda: self._tables
        )
        self._schema_changes: list[str] = []  # those of the last planned batch, described

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a copy without connections, threads or caches: they read partitions only.
        state = dict(self.__dict__)
        for transient in ("_slot", "_snapshot", "_store", "_stream"):
            state[transient] = None  # executors need none
        state["_cache"], state["_retired"] = [], []
        return state

    # -- driver: setup -------------------------------------------------------------------------

    @property
    def snapshot(self) -> InitialSnapshot:
        """The initial snapshot phase (driver)."""
        assert self._snapshot is not None, "executors read partitions only"
        return self._snapshot

    @property
    def stream(self) -> StreamReader:
        """The stream's reader (driver)."""
        assert self._stream is not None, "executors read partitions only"
        return self._stream

    @property
    def slot(self) -> Slot:
        """The slot (driver)."""
        if self._slot is None:
            self._slot = Slot(self.dsn, self.options.slot, self.options.plugin, self.publication)
        return self._slot

    def check(self) -> None:
        """Fail early (driver, once per run): connection, wal_level, tables, an existing slot."""
        conn = self.slot.connection()
        level = conn.execute("SHOW wal_level").fetchone()
        if level is None or level[0] != "logical":
            raise ReplicationSlotError(
                f"the server at {redact_dsn(self.dsn)} runs with wal_level="
                f"{None if level is None else level[0]}; logical decoding needs wal_level=logical "
                f"in postgresql.conf (and a restart)"
            )
        self._tables = describe_tables(conn, self.options.tables)
        if self.options.snapshot == "incremental":
            for table in self._tables:
                require_key(table)
        if self.options.plugin == "pgoutput":
            # Before any slot is created: pgoutput reads the publication as of each change.
            ensure_publication(conn, self.dsn, self.publication, self._tables)
        info = self.slot.info()
        if info is not None:
            self.slot.check(info)

    def initial_offset(self) -> dict[str, Any]:
        """Where a new query starts: the snapshot, or the slot's position (created if missing).

        Runs on the driver, once per run (the reader keeps the answer for Spark, which asks at
        every trigger until it logs a first offset).
        """
        if self.options.snapshot == "initial":
            # Asked again once this source's snapshot has started, the slot is its own: the
            # snapshot's thread creates the slot before it writes the manifest that proves so.
            if not self.snapshot.claimed:
                claim_snapshot_slot(self.slot, self.spill)
            return PgOffset(-1, 0, "snapshot", None).to_json()
        info = self.slot.info() or self.slot.create()
        state = IncrementalState() if self.options.snapshot == "incremental" else None
        schemas = self.stream.catalog_schemas()
        return PgOffset(-1, 0, "stream", info.confirmed_flush, state, schemas).to_json()

    def resume(self, offset: dict[str, Any]) -> None:
        """Check the slot still holds everything after the restored offset (driver, once)."""
        restored = PgOffset.from_json(offset)
        if restored.phase == "snapshot":
            return  # the snapshot is (re)taken: nothing was read yet
        if restored.incremental is not None:
            state = restored.incremental
            _log.info(
                "postgres slot %s resumes its incremental snapshot: %d chunk(s) (%d rows) "
                "emitted before are not read again; %d pending chunk(s) are emitted from their "
                "spill or read again",
                self.options.slot,
                state.chunks_done,
                state.rows_done,
                len(state.pending),
            )
        check_resume(self.slot, self.spill, restored)

    # -- driver: planning ------------------------------------------------------------------------

    def _start_lsn(self, start: PgOffset) -> int:
        # No LSN: right after the snapshot (or an empty one), the slot's consistent point.
        if start.lsn is not None:
            return start.lsn
        info = self.slot.info()
        if info is None:
            raise ReplicationSlotError(
                f"replication slot {self.options.slot!r} disappeared after the snapshot: the "
                f"changes it retained are gone. Start over with a new checkpointLocation"
            )
        return info.confirmed_flush

    def plan(self, start: dict[str, Any], max_changes: int | None) -> Plan:
        """The complete transactions after ``start`` (or the snapshot's progress)."""
        offset = PgOffset.from_json(start)
        self._planning = offset
        self._snapshot_unit = False
        self._schema_changes = []
        if offset.phase == "snapshot":
            plan = self.snapshot.plan(bounded=self._target is not None)
            if plan.unit_sizes != [0]:
                self._snapshot_unit = bool(plan.unit_sizes)
                return plan
            # The tables were empty: no snapshot batch; stream from the slot's consistent point.
        lsn = self._start_lsn(offset)
        self._health = self.slot.health()  # every trigger: a lost slot fails the query here
        snapshotting = self._snapshotting(offset)
        if snapshotting and self._target is not None:
            # A bounded run finishes the snapshot: its chunks' watermarks lie beyond the
            # target fixed when it started, so the target follows the WAL until then.
            assert offset.incremental is not None
            flushed = self._incremental.flushed_past(offset.incremental, self._flush_lsn)
            self._target = max(self._target, flushed)
            self._cache_complete_to = None
        self._cache = [t for t in self._cache if t.end_lsn > lsn]
        cached = sum(t.size for t in self._cache)
        heartbeat = self._heartbeat_due()
        if heartbeat:
            self._emit_heartbeat()
        # Peek again unless the cache holds a full batch, or a bounded run (availableNow) already
        # read everything up to its target.
        done = self._target is not None and self._cache_complete_to is not None
        if not done and (max_changes is None or cached < max_changes):
            self._peek(lsn, max_changes)
        pending = [t for t in self._cache if t.size]
        now_us = time.time() * 1_000_000
        oldest = pending[0].commit_ts_us if pending else None
        self._lag_seconds = 0.0 if oldest is None else max(0.0, (now_us - oldest) / 1_000_000)
        units = [t.size for t in pending]
        if snapshotting and not units:
            idle = self._incremental.batch(
                offset, lsn, [], self._complete_lsn, self._stream_partitions
            )
            if idle is not None:
                return Plan([], None, 0, idle)
        quiet_until = max((t.end_lsn for t in self._cache), default=lsn)
        if heartbeat and not units and quiet_until > lsn:
            # Only empty transactions and heartbeats since the offset: move past them.
            end = PgOffset(
                offset.checkpoint + 1,
                offset.emitted,
                "stream",
                quiet_until,
                offset.incremental,
                offset.schemas,
            )
            self._moved_at = time.monotonic()
            return Plan([], None, 0, PlannedBatch(end.to_json(), []))
        return Plan(units, None, 0)

    # -- driver: the incremental snapshot ---------------------------------------------------

    def _read_again(self, start: PgOffset, tables: list[str]) -> PgOffset:
        """``start`` with ``tables`` queued for reading again, in chunks (driver, per rebuild).

        A schema change the batch holds that a mirror cannot follow in place begins a new
        read of its table (:mod:`spark_ckpt.sinks.mirror.rebuild`), by the incremental
        snapshot's chunks, after whatever that snapshot still has to read.
        """
        state = start.incremental or IncrementalState(table=len(self._described()))
        _log.info(
            "postgres slot %s reads table(s) %s again: a schema change their mirrors cannot "
            "follow in place",
            self.options.slot,
            ", ".join(tables),
        )
        return dataclasses.replace(
            start, incremental=dataclasses.replace(state, rebuild=state.rebuild + tuple(tables))
        )

    def _describe_now(self, table: str) -> TableInfo:
        """``table`` as the catalog describes it now (driver, once per rebuild)."""
        return describe_tables(self.slot.connection(), [table])[0]

    def _snapshotting(self, offset: PgOffset) -> bool:
        """True while ``offset`` has an incremental snapshot with chunks to read or emit."""
        state = offset.incremental
        return state is not None and not state.finished(len(self._tables))

    def _flush_lsn(self) -> int:
        """The WAL flushed so far: what a peek started now can decode (driver).

        Not the insert or write position: a commit is inserted before it is flushed (long
        before, with ``synchronous_commit=off``), and a peek decodes flushed WAL only.
        """
        row = self.slot.connection().execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()
        assert row is not None
        return parse_lsn(row[0])

    def _described(self) -> list[TableInfo]:
        """The captured tables, described on first use (driver)."""
        if not self._tables:
            self._tables = describe_tables(self.slot.connection(), self.options.tables)
        return self._tables

    def _new_chunk_planner(self) -> ChunkPlanner:
        """The incremental snapshot's chunk planner (driver, once per process)."""
        return ChunkPlanner(
            self.dsn,
            self.source,
            self.options.slot,
            self._described(),
            self._incremental.directory,
            self.options.snapshot_chunk_rows,
            self.options.snapshot_parallelism,
            self.slot.connection,
            self.stream.window,
            self.column_types,
            self._describe_now,
        )

    def _heartbeat_due(self) -> bool:
        """True when the position has not moved for ``heartbeat_interval`` (stream phase)."""
        if self._target is not None or self._heartbeat_broken:
            return False  # a bounded run or a drain ends at its target: no empty batches
        if any(t.size for t in self._cache):
            return False  # a batch will move the position anyway
        return time.monotonic() - self._moved_at >= self.options.heartbeat_interval

    def _emit_heartbeat(self) -> None:
        """Write a heartbeat message so that a quiet database's slot can still be confirmed."""
        try:
            self.slot.emit_heartbeat()
        except psycopg.Error as e:
            self._heartbeat_broken = True
            _log.warning(
                "postgres slot %s: cannot write heartbeats (%s); while the captured database "
                "is quiet the slot keeps WAL until its next change. Grant EXECUTE on "
                "pg_logical_emit_message, or set heartbeatInterval=unlimited to silence this",
                self.options.slot,
                scrub(str(e).strip(), self.dsn),
            )

    def _peek(self, lsn: int, max_changes: int | None) -> None:
        rows_wanted = None if max_changes is None else max(4 * max_changes, _READ_AHEAD_MIN)
        # Read before the peek: a peek that returns everything covers the WAL up to here. Only
        # the incremental snapshot places chunks by it; other queries skip the round trip.
        assert self._planning is not None
        chunking = self.options.snapshot == "incremental" or self._planning.incremental is not None
        flushed = self._flush_lsn() if chunking else None
        rows, txns, store = self.stream.read(self._target, rows_wanted, lsn, self._planning.schemas)
        if self._store is not None:
            self._retired.append(self._store)  # a planned batch may still read it
        self._store = store
        self._cache = [t for t in txns if t.end_lsn > lsn]
        # A short peek read everything the server had (up to the availableNow target).
        exhausted = rows_wanted is None or rows < rows_wanted
        self._cache_complete_to = lsn if exhausted else None
        reach = flushed
        if reach is not None and self._target is not None:
            reach = min(reach, self._target)
        self._complete_lsn = reach if exhausted else None

    def availability(self, cut: Cut) -> SnapshotAvailability:
        """Every transaction boundary is available; nothing else is ever proposed (gate on)."""
        if cut.at_boundary:
            return AVAILABLE
        return SnapshotAvailability.hard_failure(
            "the postgres connector delivers whole transactions only (gate=off is not supported)"
        )

    def batch(self, cut: Cut, checkpoint_id: int) -> PlannedBatch:
        """The batch after unit ``cut.unit``: the snapshot, or whole transactions."""
        start = self._planning
        assert start is not None, "batch() follows plan()"
        if self._snapshot_unit:  # the whole snapshot is the one unit
            schemas = self.stream.catalog_schemas()  # the schemas the snapshot's rows have
            end = PgOffset(checkpoint_id, start.emitted + 1, "stream", None, None, schemas)
            return PlannedBatch(end.to_json(), self.snapshot.partitions())
        available = [t for t in self._cache if t.size]
        units = available[: cut.unit + 1]
        self._moved_at = time.monotonic()
        self._schema_changes = [change for t in units for change in t.schema_changes]
        rebuilds = [table for t in units for table in t.rebuilds]
        if rebuilds:
            start = self._read_again(start, rebuilds)
        if self._snapshotting(start):
            # Taking every transaction read, chunks may go up to where the peek found no more.
            reach = self._complete_lsn if len(units) == len(available) else None
            planned = self._incremental.batch(
                start, self._start_lsn(start), units, reach, self._stream_partitions
            )
            assert planned is not None
            return planned
        end = PgOffset(
            checkpoint_id, start.emitted + len(units), "stream", units[-1].end_lsn
        ).with_schemas(units[-1].schemas or start.schemas)
        return PlannedBatch(
            end.to_json(),
            self._stream_partitions(units, start.emitted),
            units[-1].commit_ts_us // 1000 if units[-1].commit_ts_us is not None else None,
        )

    def prepare_available_now(self) -> None:
        """Stop ``Trigger.availableNow`` (or a drain) at the server's flushed WAL position.

        Every commit acknowledged with ``synchronous_commit`` on is flushed; an asynchronous
        commit not flushed yet is for the next run. A snapshot phase still to come is waited
        for rather than declined (a bounded run ends at the first trigger that offers nothing).
        """
        self._target = target = self._flush_lsn()
        # A drain fixes the target mid-run: transactions read ahead beyond it are not offered,
        # and a peek that found nothing more back then says nothing about the target.
        self._cache = [t for t in self._cache if t.end_lsn <= target]
        self._cache_complete_to = None
        self._complete_lsn = None

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed ``end``: confirm the slot up to it (driver, per batch)."""
        offset = PgOffset.from_json(end)
        if offset.phase != "stream":
            return
        if offset.lsn is None:
            # The snapshot batch is complete: its rows may go, its manifest stays until a stream
            # batch commits (it proves where the stream starts if the query restarts now).
            self.snapshot.done()
            self.spill.clear_files()
            return
        state = offset.incremental
        floor = None if state is None else state.floor()
        # While chunks are pending, their windows must stay readable from the slot.
        self.slot.advance(offset.lsn if floor is None else min(offset.lsn, floor))
        self._incremental.committed(
            end, finished=state is None and self.options.snapshot == "incremental"
        )
        # Batches up to this one are done: earlier peeks' changes are read by none of them.
        for store in self._retired:
            store.discard()
        self._retired.clear()
        if self.spill.exists():
            self.spill.clear()

    def status(self) -> dict[str, Any]:
        """The slot's lag and the snapshot's progress, as of the last plan (driver, per trigger).

        ``schemaChanges`` lists the schema changes of the batch the last plan offered, one line
        each (``public.orders: column_renamed name -> title``), or is None.
        """
        health = self._health
        progress = None if self._snapshot is None else self._snapshot.progress()
        offset = self._planning
        if offset is not None and offset.incremental is not None:
            progress = self._incremental.progress(offset.incremental, self._tables)
        return {
            "connector": self.name,
            "slot": self.options.slot,
            "phase": "snapshot"
            if offset is not None and (offset.phase == "snapshot" or offset.incremental)
            else "stream",
            **(health.to_json() if health is not None else dict.fromkeys(SLOT_HEALTH_KEYS)),
            "lagSeconds": self._lag_seconds,
            "snapshot": None if progress is None else progress.to_json(),
            "schemaChanges": self._schema_changes or None,
        }

    def stop(self) -> None:
        """Close the connections and delete spilled changes (driver, once)."""
        for store in [*self._retired, *([self._store] if self._store else [])]:
            store.discard()
        self._retired, self._store, self._cache = [], None, []
        if self._slot is not None:
            self._slot.close()
        if self._stream is not None:
            self._stream.close()

    # -- driver: partitions ----------------------------------------------------------------------

    def replan(self, start: dict[str, Any], end: dict[str, Any]) -> list[object]:
        """Partitions of a logged batch after a restart: the snapshot, or a peek of its range."""
        first, last = PgOffset.from_json(start), PgOffset.from_json(end)
        if first.phase == "snapshot" and last.lsn is None:
            return self.snapshot.partitions()
        if first.incremental is not None or last.incremental is not None:
            return self._incremental.replan(
                first, last, end, lambda n: self._replay(first, last, n), self._stream_partitions
            )
        # Stream transactions (after an empty snapshot, the start is the slot's consistent point).
        expected = last.emitted - first.emitted
        return self._stream_partitions(self._replay(first, last, expected), first.emitted)

    def _replay(self, first: PgOffset, last: PgOffset, expected: int) -> list[PgTransaction]:
        # After a restart Spark re-plans the logged batch: peek exactly the logged range again.
        assert last.lsn is not None
        lsn = self._start_lsn(first)
        _, peeked, store = self.stream.read(last.lsn, None, lsn, first.schemas)
        self._retired.append(store)  # read by the re-run batch only
        txns = [t for t in peeked if t.size and lsn < t.end_lsn <= last.lsn]
        if len(txns) != expected:
            raise RestoreError(
                f"re-reading the logged batch {format_lsn(lsn)}..{format_lsn(last.lsn)} from "
                f"slot {self.options.slot!r} found {len(txns)} transactions, not "
                f"{expected}: the slot no longer holds what the checkpoint "
                f"logged. Start over with a new checkpointLocation and slot"
            )
        return txns

    def _stream_partitions(self, txns: list[PgTransaction], emitted: int) -> list[object]:
        relations = tuple(self.stream.relations.versions) if self.stream.plugin.binary else ()
        return plan_stream_partitions(
            txns, emitted, self.changes_per_partition, self.source, self.options.plugin, relations
        )

    # -- executors -------------------------------------------------------------------------------

    def read(self, partition: object) -> Iterator[pa.RecordBatch]:
        """Yield a partition's rows (executor, per task), with ``column_types`` if asked."""
        if isinstance(partition, PgStreamPartition):
            yield from stream_rows(partition, self.column_types)
            return
        if isinstance(partition, ChunkReadPartition):
            run_chunk_read(partition)  # its rows come in a later batch
            return
        if isinstance(partition, ChunkEmitPartition):
            yield from emit_rows(partition)
            return
        assert isinstance(partition, SnapshotPartition)
        yield from snapshot_rows(partition, self.column_types)


def build(options: PostgresOptions, common: SourceOptions) -> PostgresConnector:
    """The connector, with server, tables and slot checked (driver, once per query run)."""
    spill = Location(options.snapshot_dir, common.storage) if options.snapshot_dir else None
    connector = PostgresConnector(options, common.changes_per_partition, spill, common.column_types)
    connector.check()
    return connector
