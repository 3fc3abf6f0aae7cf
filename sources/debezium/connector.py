"""The ``debezium-json`` connector: a directory of Debezium-format ``*.jsonl`` change files.

The driver plans batches with a :class:`~.planner.LogPlanner` (which also refuses data behind
the reader's position) and cuts them at offsets (:class:`~.log_offset.LogOffset`), which Spark
logs; executors read each partition's range of the log (:func:`read_range`) from the listing it was
planned from, so the same ``(start, end)`` always yields the same rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from spark_ckpt.errors import (
    LogRewrittenError,
    RestoreError,
    SourcePathError,
    StorageError,
)
from spark_ckpt.model.availability import AVAILABLE, SnapshotAvailability
from spark_ckpt.state.storage import Location

from ..connector import ChangeConnector, Plan, PlannedBatch
from ..debezium_format.envelope_schemas import SchemaRow, with_schema_rows
from ..debezium_format.types import typed_batch
from ..gate import Cut
from ..options import SourceOptions
from ..partitions import split_after
from .log_files import (
    START,
    FileOrder,
    LogFile,
    LogPosition,
    list_log_files,
    read_chunks,
)
from .log_offset import LogOffset, initial_offset
from .options import DebeziumOptions
from .planner import LogPlanner
from .transactions import NOTHING_DELIVERED, PlannedUnit, TransactionAssembler

__all__ = ["DebeziumJsonConnector", "LogOffset", "build", "read_range"]


STREAM_AT = 10_000
"""Units of at least this many changes are streamed by executors: a task keeps a transaction's
events until its END, which for a huge transaction or an initial snapshot (one unit, whatever its
size) would be all of it; the plan knows such a unit's place, size and commit time, so its rows are
built as its events are read instead."""


@dataclass(frozen=True)
class DebeziumPartition:
    """The picklable value of one input partition: read ``(start, end]`` of the log.

    ``files`` is the listing the range was planned from, so the executor reads the same bytes;
    ``streams`` are the range's large units (:data:`STREAM_AT`), whose rows the executor builds
    as their events are read; ``schema_rows`` the schema change rows of the range's
    transactions.
    """

    directory: Location
    source: str
    start: dict[str, Any]
    end: dict[str, Any]
    files: tuple[LogFile, ...]
    streams: tuple[PlannedUnit, ...] = ()
    schema_rows: tuple[SchemaRow, ...] = ()


def _as_written_now(logged: LogOffset, replanned: LogOffset) -> LogOffset:
    """``logged`` with what offsets of earlier releases left out or placed otherwise.

    Offsets of earlier releases may lack ``consumed`` and ``delivered`` (recorded since), and
    may place an open transaction at a BEGIN that is now closed by the next BEGIN and reopened at
    its first change (a BEGIN alone holds nothing; MariaDB writes one for every DDL statement).
    The same transactions open, at any first position, cut the log at the same place.
    """
    if logged.consumed is None:
        logged = replace(logged, consumed=replanned.consumed)
    if logged.delivered == NOTHING_DELIVERED:
        logged = replace(logged, delivered=replanned.delivered)
    if logged.schemas is None:
        logged = replace(logged, schemas=replanned.schemas)
    if sorted(i for i, _ in logged.open) == sorted(i for i, _ in replanned.open):
        logged = replace(logged, open=replanned.open)
    return logged


class DebeziumJsonConnector(ChangeConnector):
    """Reads a directory of Debezium change-event files as whole transactions.

    Parameters
    ----------
    log
        The change-log directory (option ``path``), local or on an object store.
    changes_per_partition
        Split a batch into partitions of about this many changes, at transaction boundaries.
    file_order
        How file names order the log (option ``fileOrder``).
    column_types
        Add the ``column_types`` column, from Kafka Connect envelopes (option ``columnTypes``).
    accept_resnapshot
        Deliver a repeated initial snapshot instead of refusing it (option ``resnapshot``).
    key_columns
        Per table, the columns that make the key of a change whose line has none (option
        ``keyColumns``).
    """

    name = "debezium-json"

    def __init__(
        self,
        log: Location,
        changes_per_partition: int = DebeziumOptions.CHANGES_PER_PARTITION,
        file_order: FileOrder = "name",
        column_types: bool = False,
        *,
        accept_resnapshot: bool = False,
        key_columns: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.log = log
        self.accept_resnapshot = accept_resnapshot
        self.key_columns = {t: list(c) for t, c in (key_columns or {}).items()}
        self.column_types = column_types
        self.directory = log.url  # for messages
        self.changes_per_partition = changes_per_partition
        self.file_order: FileOrder = file_order
        self._planner: LogPlanner | None = None
        self._available_now_target: LogPosition | None = None
        self._schema_changes: list[str] = []

    def check(self) -> None:
        """Fail early (driver, once) when the directory is missing or unreadable."""
        try:
            self.log.check_reachable()
        except StorageError as e:
            raise SourcePathError(f"option 'path': {e}") from e
        list_log_files(self.log)

    # -- driver: planning ---------------------------------------------------------------------

    def initial_offset(self) -> dict[str, Any]:
        """Start at the beginning of the log."""
        return initial_offset(self.file_order).to_json()

    def _parse(self, value: dict[str, Any]) -> LogOffset:
        offset = LogOffset.from_json(value)
        if offset.order != self.file_order:
            raise RestoreError(
                f"the checkpoint reads {self.directory!r} with fileOrder={offset.order}, but the "
                f"query now sets fileOrder={self.file_order}: positions in one order would skip "
                f"or repeat files in the other. Keep fileOrder={offset.order} for this "
                f"checkpointLocation, or start over with a new one"
            )
        return offset

    def resume(self, offset: dict[str, Any]) -> None:
        """Check that the log still holds everything from ``offset`` on (driver, once per run).

        The restored offset must be re-readable from its earliest open transaction: the files it
        names must exist and be at least as long as the positions recorded, and the files before
        its scan position must be the ones it consumed. A log rotated away, truncated or grown
        behind the position since the checkpoint would otherwise be skipped silently.
        """
        restored = self._parse(offset)
        files = {f.name: f.size for f in list_log_files(self.log, self.file_order)}
        positions = [restored.scan, *(first for _, first in restored.open)]
        for position in positions:
            if not position.file:
                continue
            path = self.log.child(position.file).url
            size = files.get(position.file)
            if size is None:
                raise RestoreError(
                    f"the restored checkpoint {restored.checkpoint} continues reading {path!r} "
                    f"at byte {position.byte}, but the file is gone: changes after the checkpoint "
                    f"would be skipped. Restore the file, or start over with a new "
                    f"checkpointLocation"
                )
            if size < position.byte:
                raise RestoreError(
                    f"the restored checkpoint {restored.checkpoint} continues reading {path!r} "
                    f"at byte {position.byte}, but the file has only {size} bytes: it was "
                    f"truncated or rewritten since (files may only be appended). Restore the "
                    f"file, or start over with a new checkpointLocation"
                )
        self._planner = self._new_planner(restored)

    def _planner_at(self, start: LogOffset) -> LogPlanner:
        if self._planner is None or self._planner.base != start:
            self._planner = self._new_planner(start)
        return self._planner

    def _new_planner(self, base: LogOffset) -> LogPlanner:
        return LogPlanner(self.log, base, self.accept_resnapshot, self.column_types)

    def plan(self, start: dict[str, Any], max_changes: int | None) -> Plan:
        """Read ahead from ``start`` until ``max_changes`` changes are in complete transactions."""
        planner = self._planner_at(self._parse(start))
        planner.scan(max_changes, self._available_now_target)
        assembler = planner.assembler
        held: SnapshotAvailability | None = None
        reason = assembler.holdup()
        if reason is not None:
            held = SnapshotAvailability.soft_failure(reason)
        oldest = assembler.oldest_open()
        return Plan(
            planner.unit_sizes(),
            held,
            assembler.held_events,
            held_units=assembler.held_transactions,
            oldest_held=None
            if oldest is None
            else f"transaction {oldest[0]!r} (first record {oldest[1].file}:{oldest[1].line + 1})",
        )

    def availability(self, cut: Cut) -> SnapshotAvailability:
        """Available exactly at transaction boundaries."""
        if cut.at_boundary:
            return AVAILABLE
        assert self._planner is not None
        txn = self._planner.assembler.unit(cut.unit)
        done = cut.within + (self._planner.base.partial if cut.unit == 0 else 0)
        return SnapshotAvailability.soft_failure(
            f"the cut would split transaction {txn.txn_id!r} after {done} of its {txn.size} "
            f"change events"
        )

    def batch(self, cut: Cut, checkpoint_id: int) -> PlannedBatch:
        """The batch ending at ``cut``; its end becomes the base of the next plan."""
        planner = self._planner
        assert planner is not None
        start = planner.base
        end = planner.offset_at(cut, checkpoint_id)
        bounds = [start, *self._split_points(planner, cut), end]
        partitions = self._partitions_of(planner, bounds)
        self._schema_changes = [
            row.summary
            for partition in partitions
            if isinstance(partition, DebeziumPartition)
            for row in partition.schema_rows
            if row.order < end.emitted or (row.order == end.emitted and row.at < end.partial)
        ]
        newest = planner.assembler.unit(cut.unit).commit_ts_ms if cut.at_boundary else None
        planner.advance(cut, end)
        return PlannedBatch(end.to_json(), partitions, newest)

    def _split_points(self, planner: LogPlanner, cut: Cut) -> list[LogOffset]:
        """Offsets at transaction boundaries inside ``(base, cut)``, about evenly spaced."""
        sizes = planner.unit_sizes()[: cut.unit + 1]
        return [
            planner.offset_at(
                Cut(index, sizes[index], sum(sizes[: index + 1]), True), planner.base.checkpoint
            )
            for index in split_after(sizes, self.changes_per_partition)
        ]

    def _partitions_of(self, planner: LogPlanner, bounds: list[LogOffset]) -> list[object]:
        source = self.log.name
        schema_rows = planner.schema_rows()
        large = [
            unit
            for unit in map(planner.assembler.unit, range(len(planner.unit_sizes())))
            if unit.size >= STREAM_AT
        ]
        return [
            DebeziumPartition(
                self.log,
                source,
                lo.to_json(),
                hi.to_json(),
                tuple(planner.files_for(lo, hi)),
                tuple(u for u in large if lo.emitted <= u.order <= hi.emitted),
                tuple(r for r in schema_rows if lo.emitted <= r.order <= hi.emitted),
            )
            for lo, hi in itertools.pairwise(bounds)
        ]

    def replan(self, start: dict[str, Any], end: dict[str, Any]) -> list[object]:
        """Re-plan a logged batch after a restart: rebuild the units of ``(start, end]``."""
        first, last = self._parse(start), self._parse(end)
        planner = self._new_planner(first)
        planner.scan(None, last.scan)
        total = last.emitted - first.emitted
        needed = total + (1 if last.partial else 0)
        found = len(planner.unit_sizes())
        if found < needed:
            raise LogRewrittenError(
                f"re-planning the logged batch up to {last.scan} found {found} "
                f"complete transactions after the start offset, not {needed}: the change log in "
                f"{self.directory!r} was modified in place (files may only be appended or added)"
            )
        planner.truncate(needed)
        sizes = planner.unit_sizes()
        if not sizes:
            return self._partitions_of(planner, [first, last])
        final = needed - 1
        if last.partial:
            within = last.partial - (first.partial if final == 0 else 0)
            cut = Cut(final, within, sum(sizes[:final]) + within, False)
        else:
            cut = Cut(final, sizes[final], sum(sizes), True)
        replanned = planner.offset_at(cut, last.checkpoint)
        if replanned != _as_written_now(last, replanned):
            raise LogRewrittenError(
                f"re-planning the logged batch {last.checkpoint} over {self.directory!r} now ends "
                f"at {replanned.to_json()}, but it was logged ending at {end}: a file "
                f"was added behind the reader's position, or a file already read was changed "
                f"or deleted. Undo the change, or start over with a new checkpointLocation"
            )
        return self._partitions_of(planner, [first, *self._split_points(planner, cut), last])

    def prepare_available_now(self) -> None:
        """Fix the end of the last file now as the target of ``Trigger.availableNow``."""
        files = list_log_files(self.log, self.file_order)
        self._available_now_target = (
            LogPosition(files[-1].name, files[-1].size, 0) if files else START
        )

    # -- executors: reading -------------------------------------------------------------------

    def read(self, partition: object) -> Iterator[pa.RecordBatch]:
        """Yield the rows of ``(start, end]`` (executor, once per task)."""
        assert isinstance(partition, DebeziumPartition)
        return read_range(
            partition.directory,
            LogOffset.from_json(partition.start),
            LogOffset.from_json(partition.end),
            partition.source,
            partition.files,
            self.column_types,
            accept_resnapshot=self.accept_resnapshot,
            key_columns=self.key_columns,
            streams=partition.streams,
            schema_rows=partition.schema_rows,
        )

    def status(self) -> dict[str, Any] | None:
        """Records this run's planner skipped so far (driver, per trigger).

        ``skipped``: changes dropped as Debezium's repeats, tombstones, heartbeats and schema
        change records. ``schemaChanges``: the schema changes of the last batch planned, one line
        each (``public.orders: column_added note``), or None. ``behind``: the ``files`` and
        ``bytes`` of the log not read yet.
        """
        planner = self._planner
        if planner is None:
            return None
        files, size = planner.behind()
        return {
            "connector": self.name,
            "skipped": planner.assembler.skipped(),
            "behind": {"files": files, "bytes": size},
            "schemaChanges": self._schema_changes or None,
        }


def read_range(
    directory: Location,
    start: LogOffset,
    end: LogOffset,
    source: str = "debezium-json",
    files: Sequence[LogFile] | None = None,
    column_types: bool = False,
    *,
    accept_resnapshot: bool = False,
    key_columns: Mapping[str, list[str]] | None = None,
    streams: Sequence[PlannedUnit] = (),
    schema_rows: Sequence[SchemaRow] = (),
) -> Iterator[pa.RecordBatch]:
    """Replay the log from ``start`` and yield the rows up to ``end`` as Arrow record batches.

    Runs on executors (once per partition) and in tests; one record batch per chunk of the log
    read. ``files`` is the listing the range was planned from (None: list the directory now).
    ``column_types`` adds the ``column_types`` column, from the lines' Kafka Connect envelopes
    (:mod:`.types`). Repeats are dropped as the planner dropped them: from what ``start``
    records as delivered, with the same ``accept_resnapshot``. ``key_columns`` makes the key of
    a change whose line has none from its image (option ``keyColumns``); ``streams`` are the range's
    large units, built into rows as their events are read; ``schema_rows`` the schema change rows
    of its transactions (:func:`~.envelope_schemas.with_schema_rows`).

    Raises
    ------
    LogRewrittenError
        When the log no longer contains what ``end`` was planned from.
    """
    order = start.order
    listing = list_log_files(directory, order) if files is None else files
    assembler = TransactionAssembler(
        start.emitted,
        keep_events=True,
        delivered=start.delivered,
        accept_resnapshot=accept_resnapshot,
    )
    assembler.emit_rows(
        (start.emitted, start.partial),
        (end.emitted, end.partial),
        source,
        column_types,
        key_columns,
        streams,
    )

    def rows() -> Iterator[pa.RecordBatch]:
        built = assembler.take_rows()
        if built is not None:
            batch = typed_batch(built) if column_types else pa.RecordBatch.from_struct_array(built)
            yield with_schema_rows(batch, schema_rows)

    target = end.emitted + (1 if end.partial else 0)
    only = {txn_id for txn_id, _ in start.open}
    if only:
        for chunk in read_chunks(directory, listing, start.resume, start.scan, order):
            assembler.feed(chunk, only)
            yield from rows()
    if assembler.next_order < target:
        for chunk in read_chunks(directory, listing, start.scan, end.scan, order):
            assembler.feed(chunk)
            yield from rows()
            if assembler.next_order >= target:
                break
    if assembler.next_order < target:
        raise LogRewrittenError(
            f"replaying {directory.url!r} from {start.scan} to {end.scan} produced transactions "
            f"up to #{assembler.next_order - 1}, but the batch was planned up to #"
            f"{end.emitted - (0 if end.partial else 1)}: the change log was modified in place "
            f"(files may only be appended or added); restore the original files"
        )


def build(options: DebeziumOptions, common: SourceOptions) -> DebeziumJsonConnector:
    """The connector, with its directory checked (driver, once per query run)."""
    connector = DebeziumJsonConnector(
        Location(options.path, common.storage),
        common.changes_per_partition,
        options.file_order,
        common.column_types,
        accept_resnapshot=options.resnapshot == "accept",
        key_columns=dict(options.key_columns),
    )
    connector.check()
    return connector
