"""The ``postgres`` connector: PostgreSQL logical decoding (wal2json or pgoutput) through a slot.

Offsets (JSON, stable key order)::

    {"v": 1, "checkpoint": k, "emitted": n,
     "phase": "snapshot" | "stream", "lsn": "0/16B3748" | null,
     "snapshot": {...}}  # only while a snapshot=incremental runs (.incremental)

``phase=snapshot`` is the start of a query with ``snapshot=initial``: the first batch is the whole
snapshot (one unit, ``op='r'``, ``txn_order`` 0), and it ends at ``phase=stream`` with
``lsn=null``, "from the slot's consistent point", so that a snapshot redone after a failed first
batch (with a new slot) still fits the logged offset. In the stream phase ``lsn`` is the end of the
last emitted transaction's commit record: the batch after it starts with the next transaction.
With ``snapshot=incremental`` the offset also says which chunks are done and pending
(:class:`~.incremental.IncrementalState`); chunks are units of their own, after a batch's
transactions.

Reading is replayable because changes are only *peeked*: the slot is confirmed
(``pg_replication_slot_advance``) in :meth:`PostgresConnector.commit`, when Spark has committed
the offset. Peeked changes are kept in the reader process as compressed chunks, spilled beyond a
bound (:mod:`.change_store`), and handed to executors inside the partitions, so each change is
decoded about once; a re-run after a restart peeks the logged range again. Transactions are whole
units: a cut is always available between them.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import itertools
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
import pyarrow as pa
import pyarrow.ipc

from spark_ckpt.errors import (
    ReplicationSlotError,
    RestoreError,
    SourcePathError,
    StateFormatError,
    StorageError,
)
from spark_ckpt.model.availability import AVAILABLE, SnapshotAvailability
from spark_ckpt.state.storage import InputFile, Location

from ..connector import ChangeConnector, Plan, PlannedBatch
from ..gate import Cut
from ..offsets import OffsetHeader, offset_json, read_offset
from ..partitions import split_after
from ..schema import change_batch, json_text, with_types
from .change_store import ChangeStore, Chunk
from .chunks import require_key
from .connect import connect, redact_dsn, scrub
from .incremental import (
    ALL_KEYS,
    ChunkEmitPartition,
    ChunkReadPartition,
    IncrementalState,
    PendingChunk,
    emit_rows,
    run_chunk_read,
)
from .incremental_plan import ChunkPlanner, WindowChange
from .lsn import format_lsn, parse_lsn
from .pgoutput import Relation, RelationCatalog
from .pgoutput import decode_transactions as decode_pgoutput
from .pgoutput import render_change as render_pgoutput
from .plugins import PLUGIN
from .publication import ensure_publication
from .slot import SLOT_HEALTH_KEYS, Slot, SlotHealth
from .snapshot import SnapshotManifest, SnapshotSpill, SnapshotTask, estimated_rows
from .snapshot_progress import SnapshotProgress
from .stream_partitions import PgStreamPartition, Piece, chunk_spans, fill_partitions, stream_rows
from .tables import TableInfo, describe_tables
from .types import types_json
from .wal2json import PgTransaction, decode_change, decode_transactions

__all__ = ["PostgresConnector"]

_log = logging.getLogger(__name__)
_READ_AHEAD_MIN = 20_000  # peek at least this many rows ahead, to serve several small batches
_FLUSH_WAIT_S = 60.0  # the WAL writer flushes within 3 * wal_writer_delay (at most 10 s)

Phase = Literal["snapshot", "stream"]


@dataclass(frozen=True)
class PgOffset:
    """A position of the ``postgres`` connector (see the module docstring)."""

    checkpoint: int
    emitted: int
    phase: Phase
    lsn: int | None
    incremental: IncrementalState | None = None
    """``snapshot=incremental`` until its last chunk is emitted (key ``snapshot``)."""

    def to_json(self) -> dict[str, Any]:
        """Render in the :mod:`..offsets` envelope, with a fixed key order."""
        lsn = None if self.lsn is None else format_lsn(self.lsn)
        body: dict[str, Any] = {"phase": self.phase, "lsn": lsn}
        if self.incremental is not None:
            body["snapshot"] = self.incremental.to_json()
        return offset_json(OffsetHeader(self.checkpoint, self.emitted), body)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> PgOffset:
        """Parse :meth:`to_json`.

        Raises
        ------
        LogRewrittenError
            When ``value`` is not such an offset (a checkpoint of another source).
        """
        return read_offset(value, "postgres", cls._from_body)

    @classmethod
    def _from_body(cls, header: OffsetHeader, value: Mapping[str, Any]) -> PgOffset:
        phase = value["phase"]
        if phase not in ("snapshot", "stream"):
            raise StateFormatError(f"unknown phase {phase!r}")
        lsn = value["lsn"]
        incremental = value.get("snapshot")
        return cls(
            header.checkpoint,
            header.emitted,
            phase,
            None if lsn is None else parse_lsn(str(lsn)),
            None if incremental is None else IncrementalState.from_json(incremental),
        )


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


class PostgresConnector(ChangeConnector):
    """Reads committed transactions of ``tables`` from a wal2json slot.

    Parameters
    ----------
    dsn
        libpq connection string or URI (its password is never printed).
    slot
        The replication slot (created when missing).
    tables
        ``schema.table`` names to capture.
    snapshot
        ``initial`` reads the tables' rows first, as one consistent unit; ``incremental`` reads
        them in resumable chunks alongside the stream; ``never`` starts at the slot's position.
    changes_per_partition
        Changes per Spark input partition.
    snapshot_dir
        Where the snapshot spills its rows (None: a directory under the system temp dir).
    column_types
        Add the ``column_types`` column (each image's column types, :mod:`.types`).
    heartbeat_interval
        Seconds without a batch before a heartbeat moves a quiet slot (infinite: never).
    plugin
        The slot's output plugin: ``wal2json`` or ``pgoutput``.
    publication
        pgoutput: the publication to stream (created when missing; default
        ``spark_ckpt_<slot>``).
    buffer_size
        Compressed bytes of peeked changes kept in the driver's memory; beyond, they spill to
        the spill location (:mod:`.change_store`).
    chunk_rows, parallelism
        ``snapshot=incremental``: rows per chunk, chunks read at once (:mod:`.incremental`).
    """

    name = "postgres"

    def __init__(
        self,
        dsn: str,
        slot: str,
        tables: list[str],
        snapshot: Literal["initial", "never", "incremental"],
        changes_per_partition: int = 50_000,
        snapshot_dir: Location | None = None,
        column_types: bool = False,
        heartbeat_interval: float = 60.0,
        plugin: str = PLUGIN,
        publication: str | None = None,
        buffer_size: int = 256 * 1024 * 1024,
        chunk_rows: int = 50_000,
        parallelism: int = 2,
    ) -> None:
        self.dsn = dsn
        self.chunk_rows = chunk_rows
        self.parallelism = parallelism
        self.buffer_size = buffer_size
        self.heartbeat_interval = heartbeat_interval
        self.plugin = plugin
        self.publication = publication or f"spark_ckpt_{slot}"
        self.column_types = column_types
        self.slot_name = slot
        self.table_names = tables
        self.snapshot = snapshot
        self.changes_per_partition = changes_per_partition
        digest = hashlib.sha256(f"{redact_dsn(dsn)}|{slot}".encode()).hexdigest()[:12]
        default = os.path.join(tempfile.gettempdir(), "spark-ckpt-postgres", f"{slot}-{digest}")
        self.spill = SnapshotSpill(snapshot_dir or Location(default))
        self.source = f"postgres:{slot}"
        self._slot: Slot | None = None
        self._tables: list[TableInfo] = []
        self._task: SnapshotTask | None = None
        self._cache: list[PgTransaction] = []  # decoded transactions after the last start
        self._store: ChangeStore | None = None  # the changes of the cached transactions
        self._retired: list[ChangeStore] = []  # earlier peeks' changes: gone at the next commit
        self._stream_spill_cleared = False  # this process has cleared an earlier run's spill
        self._complete_lsn: int | None = None  # the last peek read all the server had up to here
        self._planner: ChunkPlanner | None = None  # snapshot=incremental
        self._rows_estimated: int | None = None
        self._chunks_cleared = False  # the finished snapshot's spill is gone
        self._emitted_chunks: dict[str, list[PendingChunk]] = {}  # by end offset, until commit
        self._cache_complete_to: int | None = None  # the server had nothing more up to here
        self._target: int | None = None  # Trigger.availableNow: stop at this LSN
        self._planning: PgOffset | None = None  # the start offset of the last plan()
        self._snapshot_unit = False  # the last plan() offered the snapshot as its one unit
        self._health: SlotHealth | None = None  # the slot as of the last plan()
        self._lag_seconds: float | None = None
        self._moved_at = time.monotonic()  # when the last batch moved the position
        self._heartbeat_broken = False  # the server refused a heartbeat: not tried again
        self._relations = RelationCatalog(self._type_name, self._primary_key)  # pgoutput
        self._type_names: dict[tuple[int, int], str] = {}
        self._catalog_conn: psycopg.Connection[Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a copy without connections, threads or caches: they read partitions only.
        state = dict(self.__dict__)
        for transient in ("_slot", "_task", "_relations", "_store", "_catalog_conn", "_planner"):
            state[transient] = None  # executors need none
        state["_cache"], state["_retired"] = [], []
        return state

    # -- driver: setup -------------------------------------------------------------------------

    @property
    def slot(self) -> Slot:
        """The slot (driver)."""
        if self._slot is None:
            self._slot = Slot(self.dsn, self.slot_name, self.plugin, self.publication)
        return self._slot

    def _type_name(self, oid: int, typmod: int) -> str:
        """``format_type`` of a pgoutput column type (driver; one query per new pair)."""
        name = self._type_names.get((oid, typmod))
        if name is None:
            # Asked while the slot's connection streams a peek: a connection of its own.
            if self._catalog_conn is None or self._catalog_conn.closed:
                self._catalog_conn = connect(self.dsn)
            row = self._catalog_conn.execute(
                "SELECT format_type(%s::oid, %s::int)", (oid, typmod)
            ).fetchone()
            name = self._type_names[(oid, typmod)] = str(row[0]) if row else "unknown"
        return name

    def _primary_key(self, table: str) -> tuple[str, ...]:
        return next((t.key_in_column_order for t in self._tables if t.name == table), ())

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
        self._tables = describe_tables(conn, self.table_names)
        if self.snapshot == "incremental":
            for table in self._tables:
                require_key(table)
        if self.plugin == "pgoutput":
            # Before any slot is created: pgoutput reads the publication as of each change.
            ensure_publication(conn, self.dsn, self.publication, self._tables)
        info = self.slot.info()
        if info is not None:
            self.slot.check(info)

    def initial_offset(self) -> dict[str, Any]:
        """Where a new query starts: the snapshot, or the slot's position (created if missing)."""
        if self.snapshot == "initial":
            self._claimable_for_snapshot()
            return PgOffset(-1, 0, "snapshot", None).to_json()
        info = self.slot.info() or self.slot.create()
        state = IncrementalState() if self.snapshot == "incremental" else None
        return PgOffset(-1, 0, "stream", info.confirmed_flush, state).to_json()

    def _claimable_for_snapshot(self) -> bool:
        """True when the slot exists and is this source's own unfinished snapshot slot.

        Raises
        ------
        ReplicationSlotError
            When a slot of that name exists that this source did not create for its snapshot.
        """
        info = self.slot.info()
        if info is None:
            return False
        if not self._own_snapshot_slot(info.confirmed_flush, self.spill.manifest()):
            raise ReplicationSlotError(
                f"replication slot {self.slot_name!r} already exists, so snapshot=initial "
                f"cannot take a snapshot that matches its start. Drop the slot, choose "
                f"another option 'slot', or use snapshot=never to stream from the slot's "
                f"position"
            )
        return True

    def _check_slot_start(self, confirmed: int, checkpoint: int) -> None:
        # Restored right after the snapshot batch: the stream starts at the slot's consistent
        # point, which the snapshot's manifest remembers until the first stream batch commits.
        manifest = self.spill.manifest()
        if manifest is None or manifest.slot != self.slot_name:
            _log.warning(
                "cannot check that slot %s still starts at the snapshot's consistent point: the "
                "snapshot manifest in %s is gone",
                self.slot_name,
                self.spill.directory.url,
            )
            return
        if confirmed != manifest.consistent_point:
            raise RestoreError(
                f"replication slot {self.slot_name!r} is confirmed up to {format_lsn(confirmed)}, "
                f"but checkpoint {checkpoint} resumes from the snapshot's consistent point "
                f"{format_lsn(manifest.consistent_point)}: the changes in between can no longer "
                f"be read (was the slot used by another consumer?). Start over with a new "
                f"checkpointLocation and slot"
            )

    def _own_snapshot_slot(self, confirmed: int, manifest: SnapshotManifest | None) -> bool:
        # A slot this source created for a snapshot that never completed a batch: it has not
        # moved from the consistent point recorded before the snapshot was read.
        return (
            manifest is not None
            and manifest.slot == self.slot_name
            and manifest.consistent_point == confirmed
        )

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
                self.slot_name,
                state.chunks_done,
                state.rows_done,
                len(state.pending),
            )
        info = self.slot.info()
        if info is None:
            raise RestoreError(
                f"replication slot {self.slot_name!r} does not exist, but checkpoint "
                f"{restored.checkpoint} resumes from it: the changes it retained are gone. Start "
                f"over with a new checkpointLocation (snapshot=initial reads the tables again)"
            )
        self.slot.check(info)
        if restored.lsn is None:
            self._check_slot_start(info.confirmed_flush, restored.checkpoint)
        elif info.confirmed_flush > restored.lsn:
            raise RestoreError(
                f"replication slot {self.slot_name!r} is confirmed up to "
                f"{format_lsn(info.confirmed_flush)}, past checkpoint {restored.checkpoint}'s "
                f"offset {format_lsn(restored.lsn)}: the changes in between can no longer be read "
                f"(was the checkpoint location restored from an older copy, or the slot used by "
                f"another consumer?). Start over with a new checkpointLocation and slot"
            )

    # -- driver: planning ------------------------------------------------------------------------

    def _start_lsn(self, start: PgOffset) -> int:
        # No LSN: right after the snapshot (or an empty one), the slot's consistent point.
        if start.lsn is not None:
            return start.lsn
        info = self.slot.info()
        if info is None:
            raise ReplicationSlotError(
                f"replication slot {self.slot_name!r} disappeared after the snapshot: the "
                f"changes it retained are gone. Start over with a new checkpointLocation"
            )
        return info.confirmed_flush

    def plan(self, start: dict[str, Any], max_changes: int | None) -> Plan:
        """The complete transactions after ``start`` (or the snapshot's progress)."""
        offset = PgOffset.from_json(start)
        self._planning = offset
        self._snapshot_unit = False
        if offset.phase == "snapshot":
            plan = self._plan_snapshot()
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
            self._target = max(self._target, self._flushed_past(offset.incremental))
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
            idle = self._chunk_batch(offset, lsn, [], all_taken=True)
            if idle is not None:
                return Plan([], None, 0, idle)
        quiet_until = max((t.end_lsn for t in self._cache), default=lsn)
        if heartbeat and not units and quiet_until > lsn:
            # Only empty transactions and heartbeats since the offset: move past them.
            end = PgOffset(
                offset.checkpoint + 1, offset.emitted, "stream", quiet_until, offset.incremental
            )
            self._moved_at = time.monotonic()
            return Plan([], None, 0, PlannedBatch(end.to_json(), []))
        return Plan(units, None, 0)

    # -- driver: the incremental snapshot ---------------------------------------------------

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

    def _flushed_past(self, state: IncrementalState) -> int:
        """The flushed WAL position, once past the read chunks' watermarks (driver, per trigger).

        For a bounded run only, which ends at the first trigger that offers nothing, so it
        must not ask while a read chunk waits for its watermark to be flushed. An asynchronous
        commit is flushed by the WAL writer within ``3 * wal_writer_delay``, any synchronous
        commit flushes everything before it; only the WAL of a transaction left open on a
        server where nothing commits stays unflushed (a warning, after a minute).
        """
        needed = self._chunk_planner().watermark(state)
        flushed = self._flush_lsn()
        deadline = time.monotonic() + _FLUSH_WAIT_S
        while needed is not None and flushed < needed and time.monotonic() < deadline:
            time.sleep(0.05)
            flushed = self._flush_lsn()
        if needed is not None and flushed < needed:
            _log.warning(
                "postgres slot %s: the WAL is flushed up to %s only, short of a snapshot chunk's "
                "high watermark %s after %.0f s; this bounded run may end before the snapshot",
                self.slot_name,
                format_lsn(flushed),
                format_lsn(needed),
                _FLUSH_WAIT_S,
            )
        return flushed

    def _chunk_planner(self) -> ChunkPlanner:
        if self._planner is None:
            if not self._tables:
                self._tables = describe_tables(self.slot.connection(), self.table_names)
            self._planner = ChunkPlanner(
                self.dsn,
                self.source,
                self.slot_name,
                self._tables,
                self.spill.directory.child("chunks"),
                self.chunk_rows,
                self.parallelism,
                self.slot.connection,
                self._window,
                self.column_types,
            )
        return self._planner

    def _chunk_batch(
        self, start: PgOffset, lsn: int, taken: list[PgTransaction], all_taken: bool
    ) -> PlannedBatch | None:
        """The batch with ``taken`` transactions and the snapshot's chunk work (driver).

        Chunks are emitted after the transactions, at the end of the stream part, or further
        (up to where the last peek found nothing more) when the batch takes every transaction
        read: a chunk waits until the stream has been read past its high watermark.
        """
        assert start.incremental is not None
        stream_end = taken[-1].end_lsn if taken else lsn
        reach = stream_end
        if all_taken and self._complete_lsn is not None:
            reach = max(reach, self._complete_lsn)
        checkpoint = start.checkpoint + 1
        work = self._chunk_planner().plan(
            start.incremental, lsn, stream_end, reach, checkpoint, start.emitted + len(taken)
        )
        if not taken and not work.emitted and work.state == start.incremental:
            return None  # nothing to read or emit yet
        state = None if work.state.finished(len(self._tables)) else work.state
        end_lsn = work.position if work.emitted else stream_end
        end = PgOffset(
            checkpoint, start.emitted + len(taken) + len(work.emits), "stream", end_lsn, state
        )
        self._emitted_chunks[_offset_key(end.to_json())] = work.emitted
        if work.emitted:
            _log.info(
                "postgres incremental snapshot of slot %s: %s",
                self.slot_name,
                self._incremental_progress(work.state).summary,
            )
        stream = self._stream_partitions(taken, start.emitted) if taken else []
        return PlannedBatch(end.to_json(), [*stream, *work.partitions])

    def _window(self, since: int, upto: int) -> list[WindowChange]:
        """The captured tables' changes committed in ``[since, upto)``, read again (driver)."""
        _, txns, store = self._read(upto, None, since)
        keys = {t.name: t.key_in_column_order for t in self._tables}
        found: list[WindowChange] = []
        read: tuple[Chunk, tuple[pa.Array, pa.Array | None]] | None = None
        try:
            for txn in txns:
                if txn.delivered or not txn.size:
                    continue
                for chunk, offset, count in store.spans(txn.first, txn.size):
                    if read is None or read[0] is not chunk:
                        read = (chunk, chunk.read())  # consecutive transactions share chunks
                    texts, relation_of = read[1]
                    for i in range(offset, offset + count):
                        data = texts[i].as_py()
                        if relation_of is None:
                            table, op, key, before = _wal2json_keys(data)
                        else:
                            relation = self._relations.versions[relation_of[i].as_py()]
                            table, op, key, before = _pgoutput_keys(data, relation)
                        if op == "t":
                            found.append((txn.end_lsn, txn.xid, table, ALL_KEYS, None))
                            continue
                        assert key is not None
                        old = None
                        if before is not None and keys.get(table):
                            old = json_text({k: before.get(k) for k in keys[table]})
                        found.append(
                            (txn.end_lsn, txn.xid, table, key, old if old != key else None)
                        )
        finally:
            store.discard()
        return found

    def _heartbeat_due(self) -> bool:
        """True when the position has not moved for ``heartbeat_interval`` (stream phase)."""
        if self._target is not None or self._heartbeat_broken:
            return False  # a bounded run or a drain ends at its target: no empty batches
        if any(t.size for t in self._cache):
            return False  # a batch will move the position anyway
        return time.monotonic() - self._moved_at >= self.heartbeat_interval

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
                self.slot_name,
                scrub(str(e).strip(), self.dsn),
            )

    def _peek(self, lsn: int, max_changes: int | None) -> None:
        rows_wanted = None if max_changes is None else max(4 * max_changes, _READ_AHEAD_MIN)
        # Read before the peek: a peek that returns everything covers the WAL up to here. Only
        # the incremental snapshot places chunks by it; other queries skip the round trip.
        flushed = self._flush_lsn() if self.snapshot == "incremental" else None
        rows, txns, store = self._read(self._target, rows_wanted, lsn)
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

    def _read(
        self, upto_lsn: int | None, upto_rows: int | None, start_lsn: int
    ) -> tuple[int, list[PgTransaction], ChangeStore]:
        """Stream a peek of the slot into transactions; return (rows read, them, their changes).

        Runs on the driver. Changes go to a new :class:`ChangeStore` as they arrive, so memory
        is bounded by ``buffer_size`` whatever the transactions' sizes; those of transactions
        that committed before ``start_lsn`` (delivered, not yet confirmed) are not kept.
        """
        if not self._stream_spill_cleared:
            # Chunks an earlier run spilled (a killed driver never discarded them). Not in
            # check(): Spark also builds readers in other processes, which read nothing.
            self.spill.stream_directory().delete_tree()
            self._stream_spill_cleared = True
        store = ChangeStore(
            self.plugin == "pgoutput", self.spill.stream_directory(), self.buffer_size
        )
        counted = 0

        def rows() -> Iterator[tuple[str, int | None, Any]]:
            nonlocal counted
            for row in self.slot.stream(upto_lsn, upto_rows, self.table_names):
                counted += 1
                yield row

        # Hundreds of thousands of rows and transactions, none of them cyclic: a cyclic GC pass
        # every few hundred allocations would only re-scan them (about a third of the grouping).
        enabled = gc.isenabled()
        gc.disable()
        try:
            tables = frozenset(self.table_names)
            if self.plugin == "pgoutput":
                # Every peek is a new decoding session: relations are described again in it.
                self._relations.current.clear()
                txns = list(decode_pgoutput(rows(), self._relations, tables, store, start_lsn))
            else:
                txns = list(decode_transactions(rows(), tables, store, start_lsn))
        finally:
            if enabled:
                gc.enable()
        store.seal()
        if store.spilled_chunks:
            _log.info(
                "postgres slot %s: %d of %d chunks of peeked changes spilled to %s "
                "(streamBufferSize %d bytes)",
                self.slot_name,
                store.spilled_chunks,
                len(store.chunks),
                store.spill_directory.url,
                self.buffer_size,
            )
        return counted, txns, store

    def _plan_snapshot(self, rerun: bool = False) -> Plan:
        task = self._task
        if task is None:
            # A re-run of the logged snapshot batch owns the slot (it was claimed when the batch
            # was planned); otherwise only a slot this source made for its snapshot may go.
            if (rerun and self.slot.info() is not None) or self._claimable_for_snapshot():
                self.slot.drop()
            self.slot.close()
            task = self._task = SnapshotTask(
                self.dsn, self.slot_name, self._tables, self.spill, self.plugin
            )
            task.start()
        if self._target is not None:
            # Trigger.availableNow ends at the first trigger that offers nothing, so a bounded
            # run waits for the snapshot instead of declining.
            task.join()
        if task.is_alive():
            # The snapshot is read in one transaction: one open unit, growing as rows arrive.
            return Plan(
                [],
                SnapshotAvailability.soft_failure(task.describe()),
                task.rows_read,
                held_units=1,
                oldest_held=f"the initial snapshot of slot {self.slot_name!r}",
            )
        if task.error is not None:
            error, self._task = task.error, None
            raise error
        assert task.manifest is not None
        return Plan([task.manifest.rows], None, 0)

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
            end = PgOffset(checkpoint_id, start.emitted + 1, "stream", None)
            return PlannedBatch(end.to_json(), self._snapshot_partitions(start))
        available = [t for t in self._cache if t.size]
        units = available[: cut.unit + 1]
        self._moved_at = time.monotonic()
        if self._snapshotting(start):
            planned = self._chunk_batch(
                start, self._start_lsn(start), units, len(units) == len(available)
            )
            assert planned is not None
            return planned
        end = PgOffset(checkpoint_id, start.emitted + len(units), "stream", units[-1].end_lsn)
        return PlannedBatch(end.to_json(), self._stream_partitions(units, start.emitted))

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
            self._task = None
            self.spill.clear_files()
            return
        state = offset.incremental
        floor = None if state is None else state.floor()
        # While chunks are pending, their windows must stay readable from the slot.
        self.slot.advance(offset.lsn if floor is None else min(offset.lsn, floor))
        emitted = self._emitted_chunks.pop(_offset_key(end), [])
        if emitted:
            self._chunk_planner().discard(emitted)
        if state is None and self.snapshot == "incremental" and not self._chunks_cleared:
            self.spill.directory.child("chunks").delete_tree()  # leftovers of killed runs
            self._chunks_cleared = True
        # Batches up to this one are done: earlier peeks' changes are read by none of them.
        for store in self._retired:
            store.discard()
        self._retired.clear()
        if self.spill.exists():
            self.spill.clear()

    def status(self) -> dict[str, Any]:
        """The slot's lag and the snapshot's progress, as of the last plan (driver, per trigger)."""
        health = self._health
        task = self._task
        progress = None if task is None else task.progress()
        offset = self._planning
        if offset is not None and offset.incremental is not None:
            progress = self._incremental_progress(offset.incremental)
        return {
            "connector": self.name,
            "slot": self.slot_name,
            "phase": "snapshot"
            if offset is not None and (offset.phase == "snapshot" or offset.incremental)
            else "stream",
            **(health.to_json() if health is not None else dict.fromkeys(SLOT_HEALTH_KEYS)),
            "lagSeconds": self._lag_seconds,
            "snapshot": None if progress is None else progress.to_json(),
        }

    def _incremental_progress(self, state: IncrementalState) -> SnapshotProgress:
        """An incremental snapshot's progress (driver, per trigger; one estimate per run)."""
        if self._rows_estimated is None and self._tables:
            self._rows_estimated = estimated_rows(self.slot.connection(), self._tables) or 0
        busy = {c.bounds.table for c in state.pending}
        current = self._tables[state.table].name if state.table < len(self._tables) else None
        tables_done = sum(
            1 for i, t in enumerate(self._tables) if i < state.table and t.name not in busy
        )
        return SnapshotProgress(
            len(self._tables),
            tables_done,
            state.rows_done,
            self._rows_estimated or None,
            current or (min(busy) if busy else None),
            state.chunks_done,
            len(state.pending),
        )

    def stop(self) -> None:
        """Close the connections and delete spilled changes (driver, once)."""
        for store in [*self._retired, *([self._store] if self._store else [])]:
            store.discard()
        self._retired, self._store, self._cache = [], None, []
        if self._slot is not None:
            self._slot.close()
        if self._catalog_conn is not None:
            self._catalog_conn.close()

    # -- driver: partitions ----------------------------------------------------------------------

    def replan(self, start: dict[str, Any], end: dict[str, Any]) -> list[object]:
        """Partitions of a logged batch after a restart: the snapshot, or a peek of its range."""
        first, last = PgOffset.from_json(start), PgOffset.from_json(end)
        if first.phase == "snapshot" and last.lsn is None:
            return self._snapshot_partitions(first)
        if first.incremental is not None:
            return self._replan_chunks(first, last, end)
        # Stream transactions (after an empty snapshot, the start is the slot's consistent point).
        expected = last.emitted - first.emitted
        return self._stream_partitions(self._replay(first, last, expected), first.emitted)

    def _replan_chunks(self, first: PgOffset, last: PgOffset, end: dict[str, Any]) -> list[object]:
        """A logged batch of the incremental snapshot again: its transactions and chunks."""
        assert first.incremental is not None
        assert last.lsn is not None
        final = last.incremental or IncrementalState(table=len(self._tables))
        work = self._chunk_planner().replan(first.incremental, final, last.lsn, last.checkpoint, 0)
        streamed = last.emitted - first.emitted - len(work.emits)
        txns = self._replay(first, last, streamed) if streamed else []
        emits = [
            dataclasses.replace(e, txn_order=first.emitted + streamed + i)
            for i, e in enumerate(work.emits)
        ]
        self._emitted_chunks[_offset_key(end)] = work.emitted
        stream = self._stream_partitions(txns, first.emitted) if txns else []
        return [*stream, *emits, *work.reads]

    def _replay(self, first: PgOffset, last: PgOffset, expected: int) -> list[PgTransaction]:
        # After a restart Spark re-plans the logged batch: peek exactly the logged range again.
        assert last.lsn is not None
        lsn = self._start_lsn(first)
        _, peeked, store = self._read(last.lsn, None, lsn)
        self._retired.append(store)  # read by the re-run batch only
        txns = [t for t in peeked if t.size and lsn < t.end_lsn <= last.lsn]
        if len(txns) != expected:
            raise RestoreError(
                f"re-reading the logged batch {format_lsn(lsn)}..{format_lsn(last.lsn)} from "
                f"slot {self.slot_name!r} found {len(txns)} transactions, not "
                f"{expected}: the slot no longer holds what the checkpoint "
                f"logged. Start over with a new checkpointLocation and slot"
            )
        return txns

    def _stream_partitions(self, txns: list[PgTransaction], emitted: int) -> list[object]:
        # At transaction boundaries, in runs of about changes_per_partition changes, and at
        # least two runs when there is enough work for both executor cores; a transaction
        # larger than a partition is split into parts (each knows its first event index).
        sizes = [t.size for t in txns]
        limit = self.changes_per_partition
        bounds = [0, *(i + 1 for i in split_after(sizes, limit, spread=2))]
        relations = tuple(self._relations.versions) if self.plugin == "pgoutput" else ()
        partitions: list[object] = []
        for lo, hi in itertools.pairwise([*bounds, len(txns)]):
            pieces: list[tuple[PgTransaction, Piece]] = []
            for order, t in enumerate(txns[lo:hi], start=emitted + lo):
                for start in range(0, t.size, limit):
                    count = min(limit, t.size - start)
                    pieces.append((t, (t.xid, order, t.commit_ts_us, t.size, start, count)))
            for part in fill_partitions(pieces, limit):
                spans = chunk_spans(part)
                partitions.append(
                    PgStreamPartition(self.source, tuple(p for _, p in part), spans, relations)
                )
        return partitions

    def _snapshot_partitions(self, first: PgOffset) -> list[object]:
        manifest = self.spill.manifest()
        info = self.slot.info()
        reusable = (
            manifest is not None
            and manifest.complete
            and info is not None
            and self._own_snapshot_slot(info.confirmed_flush, manifest)
        )
        if not reusable:
            # A re-run of the snapshot batch whose spill did not survive: take it again.
            _log.warning("postgres snapshot of slot %s is taken again", self.slot_name)
            self._task = None
            if not self._tables:
                self._tables = describe_tables(self.slot.connection(), self.table_names)
            self._plan_snapshot(rerun=True)
            task = self._task
            assert task is not None
            task.join()
            if task.error is not None:
                raise task.error
            manifest = task.manifest
        assert manifest is not None
        txn_id = f"snapshot:{self.slot_name}@{format_lsn(manifest.consistent_point)}"
        types: tuple[tuple[str, str], ...] = ()
        if self.column_types:
            types = tuple((t.name, types_json(t.columns)) for t in self._tables)

        def partition(files: list[tuple[Location, int]]) -> PgSnapshotPartition:
            return PgSnapshotPartition(
                tuple(files), manifest.rows, txn_id, manifest.taken_at_us, self.source, types
            )

        partitions: list[object] = []
        files: list[tuple[Location, int]] = []
        rows_in = 0
        index = 0
        for name, rows in manifest.files:
            files.append((self.spill.file(name), index))
            index += rows
            rows_in += rows
            if rows_in >= self.changes_per_partition:
                partitions.append(partition(files))
                files, rows_in = [], 0
        if files:
            partitions.append(partition(files))
        return partitions

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
        assert isinstance(partition, PgSnapshotPartition)
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
                        commit_ts=pa.array(
                            [partition.taken_at_us] * n, pa.timestamp("us", tz="UTC")
                        ),
                        table=spilled.column("table"),
                        op=pa.array(["r"] * n, pa.string()),
                        key=spilled.column("key"),
                        before=pa.nulls(n, pa.string()),
                        after=spilled.column("after"),
                    )
                    if self.column_types:
                        tables = spilled.column("table").to_pylist()
                        types = pa.array([types_of.get(t) for t in tables], pa.string())
                        batch = with_types(batch, types)
                    yield batch
                    offset += n


def _offset_key(offset: dict[str, Any]) -> str:
    return json.dumps(offset, sort_keys=True)


def _wal2json_keys(text: str) -> tuple[str, str, str | None, dict[str, Any] | None]:
    """``(table, op, key text, before image)`` of one wal2json change (driver, windows)."""
    change = decode_change(text)
    return change.table, change.op, json_text(change.key), change.before


def _pgoutput_keys(
    data: bytes, relation: Relation
) -> tuple[str, str, str | None, dict[str, Any] | None]:
    """``(table, op, key text, before image)`` of one pgoutput change (driver, windows)."""
    table, op, key, before, _ = render_pgoutput(data, relation)
    return table, op, key, None if before is None else json.loads(before)


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
