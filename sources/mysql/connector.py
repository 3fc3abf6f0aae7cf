"""The ``mysql`` connector: MySQL's and MariaDB's binlog as whole transactions.

The driver reads the binlog from the last offset (:mod:`.binlog`, non-blocking: what the server
has when the trigger asks), keeps the transactions it completed, and cuts batches between them;
a batch's end offset is the binlog position after its last transaction (:mod:`.binlog_offset`).
Partitions carry their rows built (:mod:`.rows`). After a restart, Spark's last logged batch is
read again from its start position to its end, which must give the same transactions. Schema
changes of captured tables are followed from the table maps and ``ALTER TABLE`` statements
(:mod:`.schemas`); a table dropped, truncated or renamed stops the query. With
``snapshot=initial`` the tables' rows come first, as one unit consistent with the binlog position
the stream then starts at (:mod:`.initial_snapshot`). With ``snapshot=incremental`` the stream
starts at the binlog's end and the rows come in primary-key chunks beside it, read on executors
without a lock (:mod:`.incremental`, :mod:`.incremental_plan`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from spark_ckpt.errors import (
    DataLossError,
    LogRewrittenError,
    RestoreError,
)
from spark_ckpt.model.availability import AVAILABLE, SnapshotAvailability
from spark_ckpt.state.storage import Location

from ..chunk_spill import ChunkEmitPartition, emit_rows
from ..chunks import IncrementalState
from ..connector import ChangeConnector, Plan, PlannedBatch
from ..gate import Cut
from ..snapshot_spill import SnapshotPartition, snapshot_rows
from .binlog import read_transactions
from .binlog_offset import BinlogOffset, BinlogPosition, GtidStart
from .catalog import table_columns
from .chunks import ChunkReadPartition, run_chunk_read
from .gtid import reached
from .incremental import IncrementalSnapshot, check_windows_kept
from .initial_snapshot import InitialSnapshot
from .read_stores import ReadStores, stores_of
from .rows import MySqlPartition, partitions, rows
from .schemas import SchemaState, SchemaTracker, table_schema
from .server import (
    ServerInfo,
    added_column_default,
    binlog_files,
    check_server,
    connect,
    connection_settings,
    current_position,
)
from .snapshot import SnapshotSpill
from .statements import follow_statement
from .transactions import BinlogTransaction, Statement, TransactionAssembler

if TYPE_CHECKING:
    import pyarrow as pa

    from ..options import SourceOptions
    from .options import MySqlOptions

__all__ = ["MySqlConnector", "build"]

_log = logging.getLogger(__name__)

IDLE_ADVANCE_S = 60.0
"""After this long with transactions read but none captured, an empty batch moves the offset past
them, so a restart does not need binlog files the server may since have purged."""


class MySqlConnector(ChangeConnector):
    """Reads one server's binlog for the captured tables (driver: planning; executors: rows).

    Parameters
    ----------
    options
        The connector's options.
    info
        The server's version and flavour, as checked at the start.
    keys
        Each captured table's primary key columns.
    changes_per_partition
        About how many changes a Spark partition holds (whole transactions).
    column_types
        Add the ``column_types`` column (each row's table map's types, :mod:`.types`).
    spill
        Where the snapshot spills (``snapshotDir``); None: the driver's temp directory.
    """

    name = "mysql"

    def __init__(
        self,
        options: MySqlOptions,
        info: ServerInfo,
        keys: dict[str, tuple[str, ...]],
        changes_per_partition: int,
        column_types: bool,
        spill: Location | None = None,
    ) -> None:
        self.options = options
        self.info = info
        self.keys = keys
        self.changes_per_partition = changes_per_partition
        self.column_types = column_types
        self.source = f"mysql:{options.host}:{options.port}"
        self._base: BinlogOffset | None = None
        self._assembler = TransactionAssembler(keys)
        self._tracker = SchemaTracker(SchemaState())
        self._read_to: BinlogPosition | GtidStart | None = None
        self._moved: set[str] = set()
        """Binlog files of restored offsets that this server does not have (or not as theirs)."""
        self._units: list[BinlogTransaction] = []
        self._target: BinlogPosition | None = None
        self._last_batch = time.monotonic()
        self._lag_seconds: float | None = None
        where = f"{options.host}:{options.port}:{options.server_id}|{','.join(options.tables)}"
        digest = hashlib.sha256(where.encode()).hexdigest()[:12]
        default = os.path.join(tempfile.gettempdir(), "spark-ckpt-mysql", digest)
        self._stores = ReadStores(
            (spill or Location(default)).child("stream"), options.stream_buffer_size
        )
        self._snapshot = InitialSnapshot(
            options,
            keys,
            SnapshotSpill(spill or Location(default)),
            self.source,
            changes_per_partition,
            column_types,
        )
        self._incremental: IncrementalSnapshot | None = None
        if options.snapshot == "incremental":
            self._incremental = IncrementalSnapshot(
                options,
                keys,
                self.source,
                (spill or Location(default)).child("chunks"),
                column_types,
                lambda: self._new_tracker(self._base or BinlogOffset(-1, 0, None)),
                self._stores.new,
                info.identity or None,
            )
        self._reach: BinlogPosition | None = None  # read to here, nothing open (incremental)
        self._initial: BinlogOffset | None = None
        self._snapshot_unit = False  # the last plan() offered the snapshot as its one unit

    def __getstate__(self) -> dict[str, Any]:
        # Executors need only what read() uses: no planning state, no password.
        return {"column_types": self.column_types}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # -- driver: planning ----------------------------------------------------------------------

    def initial_offset(self) -> dict[str, Any]:
        """The snapshot to come, or the binlog's end at this run's first call (driver)."""
        if self.options.snapshot == "initial":
            return BinlogOffset(-1, 0, None).to_json()
        if self._initial is None:
            # Once per run: Spark asks again for the first batch's partitions, and that start
            # must be the one the batch was planned from, not the binlog's end by then.
            # The tables' schemas first, then the position: a DDL in between is then a change
            # from the schemas read (reported at its first row event), never one taken as the
            # schema the stream starts with (which would hide it: the mirror would miss, say,
            # the default an added column gives the existing rows).
            schemas = self._catalog_schemas()
            position, gtid = current_position(self.options, self.info)
            state = IncrementalState() if self.options.snapshot == "incremental" else None
            self._initial = BinlogOffset(
                -1, 0, position, gtid, schemas, server=self._identity, incremental=state
            )
        return self._initial.to_json()

    def _catalog_schemas(self) -> SchemaState:
        """The captured tables' schemas as the server's catalog has them now (driver)."""
        with connect(self.options) as conn:
            tables = self.options.tables
            return SchemaState({t: table_schema(table_columns(conn, t), None) for t in tables})

    @property
    def _identity(self) -> str | None:
        return self.info.identity or None

    def resume(self, offset: dict[str, Any]) -> None:
        """Check the server still has the binlog the restored offset continues in.

        An offset another server wrote (a failover to a replica), or whose binlog file this
        server no longer has, is resumed from its GTID state (:meth:`_read_start`); the server
        says at the first read whether it has the binlog from there.

        Raises
        ------
        DataLossError
            When the offset's file was purged and the offset has no GTID state to resume from,
            or another server wrote it without one; or when the offset is in the middle of a
            chunked snapshot whose pending chunks' windows start in a purged file.
        RestoreError
            When the offset is in the middle of a chunked snapshot and its binlog position is
            another server's, or a purged file's with no chunk pending.
        """
        restored = BinlogOffset.from_json(offset)
        if restored.position is None:
            return  # the snapshot is (re)taken: nothing was read yet
        other = restored.server is not None and restored.server != self._identity
        files = binlog_files(self.options)
        if not other:
            check_windows_kept(restored, files)
        if restored.position.file in files and not other:
            return
        if restored.incremental is not None:
            # The chunks' windows are binlog positions of the server that read them.
            raise RestoreError(
                f"the checkpoint is in the middle of a chunked snapshot (snapshot=incremental, "
                f"{restored.incremental.chunks_done} chunks emitted) read at "
                f"{restored.position} of server {restored.server or 'unknown'}, and this "
                f"server is {self._identity} or no longer has {restored.position.file}: the "
                f"chunks' windows are positions in that server's binlog. Resume on that "
                f"server, or start over with a new checkpointLocation"
            )
        if other and restored.gtid is None:
            raise DataLossError(
                f"the checkpoint was written reading server {restored.server} at "
                f"{restored.position}, without a GTID state, and this server is "
                f"{self._identity}: binlog positions of one server mean nothing on another. "
                f"Resume on the server the checkpoint was written on, or turn GTIDs on (MySQL: "
                f"gtid_mode=ON) and start over with a new checkpointLocation"
            )
        if restored.gtid is not None:
            _log.info(
                "the checkpoint's binlog position %s is not this server's (%s): resuming after "
                "GTID %s",
                restored.position,
                "written on " + str(restored.server) if other else "file not in its index",
                restored.gtid,
            )
            self._moved.add(restored.position.file)
            return
        raise DataLossError(
            f"the checkpoint resumes the binlog at {restored.position}, but the server no "
            f"longer has {restored.position.file} (it has {files[0] if files else 'none'} "
            f"to {files[-1] if files else 'none'}): the changes after the checkpoint were "
            f"purged (binlog_expire_logs_seconds, PURGE BINARY LOGS) before the query read "
            f"them. Start over with a new checkpointLocation, and keep binlogs longer than "
            f"the query may be stopped"
        )

    def _read_start(self, offset: BinlogOffset) -> BinlogPosition | GtidStart:
        """Where reading after ``offset`` starts on this server (driver, per plan and replan).

        Its position; or its GTID state when another server wrote it or this one lost its file
        (see :meth:`resume`).
        """
        other = offset.server is not None and offset.server != self._identity
        if offset.gtid is not None and (other or offset.at.file in self._moved):
            return GtidStart(offset.gtid)
        return offset.at

    def _start_at(self, start: BinlogOffset) -> None:
        if self._base != start:
            self._base, self._units = start, []
            self._stores.retire(self._assembler.store)
            self._assembler = TransactionAssembler(
                self.keys, self._stores.new(), gtid_state=start.gtid
            )
            self._read_to = self._read_start(start)
            self._tracker = self._new_tracker(start)

    def _new_tracker(self, start: BinlogOffset) -> SchemaTracker:
        """A schema tracker from ``start``'s schemas, asking the server for added defaults."""

        def defaults(table: str, column: str) -> tuple[bool, Any]:
            return added_column_default(self.options, self.info, table, column)

        return SchemaTracker(start.schemas or SchemaState(), defaults)

    def plan(self, start: dict[str, Any], max_changes: int | None) -> Plan:
        """Read the binlog from where the last read stopped; the transactions complete so far.

        In the snapshot phase: the snapshot's progress, then the snapshot as one unit.
        """
        offset = BinlogOffset.from_json(start)
        self._snapshot_unit = False
        if offset.position is None:
            plan = self._snapshot.plan(bounded=self._target is not None)
            if plan.held_back is not None or plan.unit_sizes:
                self._snapshot_unit = bool(plan.unit_sizes)
                return plan
            # The tables were empty: no snapshot batch; the stream starts at its position.
            offset = self._snapshot.end(offset, offset.checkpoint, self._snapshot.manifest())
            offset = replace(offset, server=self._identity)
        self._start_at(offset)
        assert self._read_to is not None
        binlog_end = None
        if offset.incremental is not None:
            # Chunks wait for the stream to pass their high watermarks: the binlog's end now is
            # read to (a bounded run's target follows it until the snapshot is done).
            binlog_end, _ = current_position(self.options, self.info)
            if self._target is not None:
                self._target = max(self._target, binlog_end)
        target = self._target
        if target is None or not _at_or_past(self._read_to, target):
            # Each read starts after the last commit read: a transaction still open at the end
            # of the last read is read again whole.
            self._assembler.discard_open()
            self._tracker.rollback()
            self._stores.retire(self._assembler.store)
            self._assembler.store = self._stores.new()
            for found in read_transactions(
                self.options,
                connection_settings(self.options),
                self._read_to,
                self._assembler,
                self._tracker,
                target,
            ):
                if isinstance(found, Statement):
                    follow_statement(found, self.options.tables, self._tracker)
                else:
                    self._units.append(found)
            self._read_to = self._assembler.passed or self._read_to
            self._stores.report(self._assembler.store, self.source)
        self._lag_seconds = lag_seconds(self._units, time.time())
        # Everything up to the binlog's end as it was before this read has been read: whole
        # transactions only (a transaction's events are written together), so it is a place
        # between transactions.
        self._reach = (
            max(self._read_to, binlog_end)
            if binlog_end is not None and isinstance(self._read_to, BinlogPosition)
            else None
        )
        held = self._assembler.held_changes
        reason = None
        if held:
            reason = SnapshotAvailability.soft_failure(
                f"a transaction's commit is not in the binlog yet ({held} changes read)"
            )
        idle = self._idle_batch()
        if offset.incremental is not None and not self._units:
            idle = self._snapshot_batch(offset, [], offset.checkpoint + 1) or idle
        return Plan(
            [t.size for t in self._units],
            reason,
            held,
            idle=idle,
            held_units=1 if held else 0,
        )

    def _snapshot_batch(
        self, base: BinlogOffset, txns: list[BinlogTransaction], checkpoint_id: int
    ) -> PlannedBatch | None:
        """``txns`` with the incremental snapshot's chunk work (None: no work, no txns)."""
        assert self._incremental is not None
        # Taking every transaction read, chunks may go up to where the read found no more: any
        # transaction after the last taken one is uncaptured, and the reader's GTID state
        # covers them all.
        if len(txns) == len(self._units) and self._reach is not None:
            reach = (self._reach, self._assembler.gtid_state)
        else:
            reach = None
        return self._incremental.batch(base, txns, reach, checkpoint_id, self._stream_partitions)

    def _idle_batch(self) -> PlannedBatch | None:
        """An empty batch past uncaptured transactions, once they are old enough (see above)."""
        base, passed = self._base, self._assembler.passed
        if self._units or base is None or passed is None:
            return None
        if not isinstance(self._read_start(base), GtidStart) and passed <= base.at:
            return None
        if time.monotonic() - self._last_batch < IDLE_ADVANCE_S:
            return None
        self._last_batch = time.monotonic()
        end = BinlogOffset(
            base.checkpoint + 1,
            base.emitted,
            passed,
            self._assembler.gtid_state,
            self._tracker.committed,
            self._identity,
            base.incremental,
        )
        return PlannedBatch(end.to_json(), [])

    def availability(self, cut: Cut) -> SnapshotAvailability:
        """Available exactly between transactions."""
        if cut.at_boundary:
            return AVAILABLE
        return SnapshotAvailability.soft_failure("a mysql batch ends only between transactions")

    def batch(self, cut: Cut, checkpoint_id: int) -> PlannedBatch:
        """The batch of the planned transactions up to ``cut``; its end is the next plan's base."""
        if self._snapshot_unit:  # the whole snapshot is the one unit
            self._snapshot_unit = False
            manifest = self._snapshot.manifest()
            after = self._snapshot.end(BinlogOffset(-1, 0, None), checkpoint_id, manifest)
            after = replace(after, server=self._identity)
            return PlannedBatch(after.to_json(), self._snapshot.partitions(manifest))
        base = self._base
        assert base is not None
        assert cut.at_boundary
        txns = self._units[: cut.unit + 1]
        self._stores.planned(checkpoint_id, txns)
        if base.incremental is not None:
            planned = self._snapshot_batch(base, txns, checkpoint_id)
            assert planned is not None  # it has transactions
        else:
            end, partitions = self._planned(base, txns, checkpoint_id)
            commit = txns[-1].commit_ts_us // 1000 if txns else None
            planned = PlannedBatch(end, partitions, commit)
        self._units = self._units[cut.unit + 1 :]
        self._base = BinlogOffset.from_json(planned.end)
        self._last_batch = time.monotonic()
        return planned

    def _stream_partitions(self, txns: list[BinlogTransaction], first_order: int) -> list[object]:
        """Transactions numbered from ``first_order``, in partitions (driver, per batch).

        A partition holds about ``changes_per_partition`` changes, in whole transactions but
        for one larger than that, which is split (:mod:`.rows`).
        """
        return partitions(self.source, txns, first_order, self.changes_per_partition)

    def _planned(
        self, base: BinlogOffset, txns: list[BinlogTransaction], checkpoint_id: int
    ) -> tuple[dict[str, Any], list[object]]:
        partitions = self._stream_partitions(txns, base.emitted)
        last = txns[-1]
        end = BinlogOffset(
            checkpoint_id,
            base.emitted + len(txns),
            last.end,
            last.gtid_state or base.gtid,
            last.schemas or base.schemas,
            self._identity,
        )
        return end.to_json(), partitions

    def replan(self, start: dict[str, Any], end: dict[str, Any]) -> list[object]:
        """Read a logged batch ``(start, end]`` again after a restart: the same transactions.

        Raises
        ------
        LogRewrittenError
            When the binlog between the two positions no longer holds those transactions.
        """
        first, last = BinlogOffset.from_json(start), BinlogOffset.from_json(end)
        if first.position is None:
            manifest = self._snapshot.spill.manifest()
            if manifest is None or not manifest.complete or manifest.rows:
                # The snapshot's own batch (spilled() refuses a spill that is not its own).
                return self._snapshot.partitions(self._snapshot.spilled(last, manifest))
            # After an empty snapshot the batch is the stream's from the snapshot's position.
            first = self._snapshot.end(first, first.checkpoint, manifest)
        if first.incremental is not None:
            assert self._incremental is not None, "the offset has snapshot chunks"
            self._base = None
            return self._incremental.replan(
                first, last, lambda n: self._replay(first, last, n, False), self._stream_partitions
            )
        count = last.emitted - first.emitted
        if count == 0:
            return []
        txns = self._replay(first, last, count, True)
        _, partitions = self._planned(first, txns, last.checkpoint)
        self._base = None
        return partitions

    def _replay(
        self, first: BinlogOffset, last: BinlogOffset, count: int, ends_batch: bool
    ) -> list[BinlogTransaction]:
        """The ``count`` transactions of a logged batch, read again (driver, after a restart).

        ``ends_batch``: the last of them ends where the batch does (not so when snapshot
        chunks placed the batch's end further).
        """
        tracker = self._new_tracker(first)
        txns: list[BinlogTransaction] = []
        store = self._stores.new()
        self._stores.retire(store)  # read by the re-run batch only
        # On another server the batch is read from its start's GTID state to its end's.
        read_from = self._read_start(first)
        by_position = isinstance(read_from, BinlogPosition) or last.gtid is None
        for found in read_transactions(
            self.options,
            connection_settings(self.options),
            read_from,
            TransactionAssembler(self.keys, store, gtid_state=first.gtid),
            tracker,
            last.at if by_position else GtidStart(str(last.gtid)),
        ):
            if isinstance(found, Statement):
                follow_statement(found, self.options.tables, tracker)
            elif not isinstance(read_from, BinlogPosition) or found.end <= last.at:
                # Read by position, the read may pass the end of a batch that snapshot chunks
                # ended between transactions; read by GTID, positions are this server's and
                # the logged end is another's (the read stops at its GTID state instead).
                txns.append(found)
        self._stores.planned(last.checkpoint, txns)
        if len(txns) != count or (ends_batch and not _ends_at(txns[-1], read_from, last)):
            raise LogRewrittenError(
                f"reading the logged batch {last.checkpoint} again from {first.position} to "
                f"{last.position} found {len(txns)} transactions, not {count}: the binlog "
                f"changed behind the query"
            )
        return txns

    def prepare_available_now(self) -> None:
        """Fix the binlog's current end as the target of ``Trigger.availableNow``."""
        self._target, _ = current_position(self.options, self.info)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed ``end``: the snapshot's spill is no longer needed (driver, per batch)."""
        offset = BinlogOffset.from_json(end)
        if offset.position is not None:
            self._snapshot.done()
            if self._incremental is not None:
                self._incremental.committed(offset)
        # Batches up to this one are done: their reads' stores go once nothing else reads them.
        live = [self._assembler.store, *stores_of(self._units)]
        self._stores.committed(offset.checkpoint, live)

    def stop(self) -> None:
        """Delete the changes spilled by reads (driver, once)."""
        self._stores.discard_all()
        self._units = []

    def status(self) -> dict[str, Any] | None:
        """Where the binlog is read, for progress events (driver, per trigger)."""
        progress = self._snapshot.progress()
        if self._incremental is not None and self._base is not None:
            state = self._base.incremental
            progress = None if state is None else self._incremental.progress(state)
        if self._read_to is None and progress is None:
            return None
        return {
            "connector": self.name,
            "server": "mariadb" if self.info.mariadb else "mysql",
            "phase": "stream" if self._read_to is not None else "snapshot",
            "binlogPosition": None if self._read_to is None else str(self._read_to),
            "gtid": self._base.gtid if self._base else None,
            "lagSeconds": self._lag_seconds,
            "snapshot": None if progress is None else progress.to_json(),
        }

    # -- executors: reading --------------------------------------------------------------------

    def read(self, partition: object) -> Iterator[pa.RecordBatch]:
        """Yield one partition's rows (executor, once per task)."""
        if isinstance(partition, SnapshotPartition):
            return snapshot_rows(partition, self.column_types)
        if isinstance(partition, ChunkReadPartition):
            run_chunk_read(partition)  # its rows come in a later batch
            return iter(())
        if isinstance(partition, ChunkEmitPartition):
            return emit_rows(partition)
        assert isinstance(partition, MySqlPartition)
        return rows(partition, self.column_types)


def _ends_at(txn: BinlogTransaction, start: BinlogPosition | GtidStart, last: BinlogOffset) -> bool:
    """Whether a batch read again ends where it was logged to end (driver, per replan).

    At its binlog position; or, read by GTID on another server, at its GTID state.
    """
    if isinstance(start, BinlogPosition):
        return txn.end == last.at
    return last.gtid is None or reached(txn.gtid_state, last.gtid)


def _at_or_past(read_to: BinlogPosition | GtidStart, target: BinlogPosition) -> bool:
    """Whether a read has reached ``target`` (a GTID start has read nothing yet)."""
    return isinstance(read_to, BinlogPosition) and read_to >= target


def lag_seconds(pending: list[BinlogTransaction], now: float) -> float:
    """Age of the oldest transaction read but not yet delivered; 0 when caught up.

    The binlog keeps commit times in whole seconds, so this is too (driver, per trigger).
    """
    if not pending:
        return 0.0
    return max(0.0, now - pending[0].commit_ts_us / 1_000_000)


def build(options: MySqlOptions, common: SourceOptions) -> MySqlConnector:
    """The connector, with the server's settings, grants and tables checked (driver, per run)."""
    info, keys = check_server(options)
    spill = Location(options.snapshot_dir, common.storage) if options.snapshot_dir else None
    return MySqlConnector(
        options, info, keys, common.changes_per_partition, common.column_types, spill
    )
