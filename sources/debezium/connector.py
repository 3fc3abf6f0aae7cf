"""The ``debezium-json`` connector: a directory of Debezium-format ``*.jsonl`` change files.

Offsets
-------
An offset is the state of the transaction assembler at a cut, small enough to live in Spark's
offset log::

    {"v": 1, "checkpoint": 7, "emitted": 120, "partial": 0,
     "scan": ["0003.jsonl", 52311, 804], "consumed": [2, 104858],
     "open": [["tx-981", "0003.jsonl", 50022, 790], ...],
     "delivered": {"high": "pg:...:...", "snapshot": ["pg:...", true]}}

``emitted`` transactions (in END order) are before the cut, plus ``partial`` events of the next
one (always 0 unless the gate is off). ``scan`` is how far the log was consumed; ``consumed``
counts the files before ``scan``'s file and their bytes; ``open`` lists the transactions consumed
in part but not emitted, with the position of their first record. ``delivered`` (absent while
empty) is what recognises Debezium's repeats after the cut: the furthest source position
delivered, and whether an initial snapshot was delivered and changes after it. With
``fileOrder=natural`` a last key ``"order": "natural"`` records the file order. To resume at an
offset, the log is re-read from the earliest open record to ``scan`` keeping only records of the
open transactions, then normally from ``scan``: the same ``(start, end)`` always yields the same
rows, because the log is append-only.

Data behind the position is never skipped
-----------------------------------------
The log is append-only by contract, and the reader checks it on every trigger rather than trust
it. The planner remembers the size of every file it has moved past; each trigger's listing must
show exactly those files with exactly those sizes before its position. A new file sorting there
raises :class:`~spark_ckpt.errors.LogOrderError`; a read file that grew, shrank or disappeared
raises :class:`~spark_ckpt.errors.LogRewrittenError`. After a restart the same is checked against
the offset's ``consumed`` count. Executors read the listing the plan was made from (names and
sizes travel in the partition), so what they deliver never depends on what was written since.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from spark_ckpt.errors import (
    LogOrderError,
    LogRewrittenError,
    RestoreError,
    SourcePathError,
    StateFormatError,
    StorageError,
)
from spark_ckpt.model.availability import AVAILABLE, SnapshotAvailability
from spark_ckpt.state.storage import Location

from ..connector import ChangeConnector, Plan, PlannedBatch
from ..gate import Cut
from ..offsets import OffsetHeader, offset_json, read_offset
from ..partitions import split_after
from .log_files import (
    START,
    FileOrder,
    LogFile,
    LogPosition,
    file_key,
    list_log_files,
    newest_modified,
    position_key,
    read_ahead,
    read_chunks,
)
from .options import DebeziumOptions
from .transactions import NOTHING_DELIVERED, Delivered, PlannedUnit, TransactionAssembler
from .types import typed_batch

__all__ = ["DebeziumJsonConnector", "LogOffset", "read_range"]


@dataclass(frozen=True)
class LogOffset:
    """A cut in the change log (see the module docstring for the JSON form).

    Attributes
    ----------
    checkpoint
        Id of the checkpoint this offset ends (-1 for the initial offset).
    emitted
        Transactions emitted before the cut, in END order.
    partial
        Events of transaction number ``emitted`` emitted before the cut (gate off only).
    scan
        Position up to which the log was consumed.
    consumed
        ``(files, bytes)`` of the files before ``scan``'s file: what a restart must find there.
        None in offsets written before it was recorded (nothing to check against).
    open
        ``(txn_id, first record position)`` of transactions consumed but not fully emitted,
        ordered by first position.
    order
        The file order the offset's positions are in.
    delivered
        What was delivered before the cut, to recognise Debezium's repeats after it.
    """

    checkpoint: int
    emitted: int
    partial: int
    scan: LogPosition
    consumed: tuple[int, int] | None
    open: tuple[tuple[str, LogPosition], ...]
    order: FileOrder = "name"
    delivered: Delivered = NOTHING_DELIVERED

    @property
    def resume(self) -> LogPosition:
        """Where re-reading must start to rebuild the state at this offset."""
        firsts = [first for _, first in self.open]
        return min(firsts, default=self.scan, key=lambda p: position_key(p, self.order))

    def to_json(self) -> dict[str, Any]:
        """Render in the :mod:`..offsets` envelope, with a fixed key order."""
        body: dict[str, Any] = {"partial": self.partial, "scan": self.scan.to_json()}
        if self.consumed is not None:
            body["consumed"] = list(self.consumed)
        body["open"] = [[txn_id, *first.to_json()] for txn_id, first in self.open]
        if self.order != "name":
            body["order"] = self.order
        if self.delivered != NOTHING_DELIVERED:
            high, snapshot = self.delivered
            body["delivered"] = {
                "high": high,
                "snapshot": None if snapshot is None else list(snapshot),
            }
        return offset_json(OffsetHeader(self.checkpoint, self.emitted), body)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> LogOffset:
        """Parse an offset written by :meth:`to_json`.

        Raises
        ------
        LogRewrittenError
            When ``value`` is not such an offset (for example a checkpoint of another source).
        """
        return read_offset(value, "debezium-json", cls._from_body)

    @classmethod
    def _from_body(cls, header: OffsetHeader, value: Mapping[str, Any]) -> LogOffset:
        open_items = tuple(
            (str(item[0]), LogPosition.from_json(list(item[1:]))) for item in value["open"]
        )
        consumed = value.get("consumed")
        order = value.get("order", "name")
        if order not in ("name", "natural"):
            raise StateFormatError(f"unknown file order {order!r}")
        delivered = NOTHING_DELIVERED
        if "delivered" in value:
            high = value["delivered"]["high"]
            snapshot = value["delivered"]["snapshot"]
            delivered = Delivered(
                None if high is None else str(high),
                None if snapshot is None else (snapshot[0], bool(snapshot[1])),
            )
        return cls(
            header.checkpoint,
            header.emitted,
            int(value["partial"]),
            LogPosition.from_json(value["scan"]),
            None if consumed is None else (int(consumed[0]), int(consumed[1])),
            open_items,
            order,
            delivered,
        )


def initial_offset(order: FileOrder) -> LogOffset:
    """The offset before the first line of a log read in ``order``."""
    return LogOffset(-1, 0, 0, START, (0, 0), (), order)


class _Planner:
    """Driver-side planning state after a base offset: assembler, scan head, units and files.

    Besides the transactions, the planner keeps what it has read of the log: ``finished``, the
    size of every file before the head's file (all consumed), and ``closed_tail``, the head file
    when its unterminated last line was consumed because a later file existed. Every trigger's
    listing is checked against them (:meth:`check_listing`) before anything new is read.
    """

    def __init__(self, log: Location, base: LogOffset, accept_resnapshot: bool = False) -> None:
        self.log = log
        self.directory = log.url  # for messages
        self.order: FileOrder = base.order
        self.base = base
        # Released transactions stay in the assembler as units until a batch delivers them.
        self.assembler = TransactionAssembler(
            base.emitted,
            keep_events=False,
            delivered=base.delivered,
            accept_resnapshot=accept_resnapshot,
        )
        self.files = list_log_files(log, self.order)
        self.finished = self._check_consumed(base)
        self.closed_tail: LogFile | None = None
        only = {txn_id for txn_id, _ in base.open}
        if only:
            for chunk in read_chunks(log, self.files, base.resume, base.scan, self.order):
                self.assembler.feed(chunk, only)
            self.assembler.regroup(base.scan)
        self.head = base.scan

    def _key(self, name: str) -> tuple[object, ...]:
        return file_key(name, self.order)

    def _check_consumed(self, offset: LogOffset) -> dict[str, int]:
        """The files before ``offset.scan``; they must match its ``consumed`` record."""
        limit = self._key(offset.scan.file)
        before = {f.name: f.size for f in self.files if self._key(f.name) < limit}
        found = (len(before), sum(before.values()))
        if offset.consumed is not None and found != offset.consumed:
            files, size = offset.consumed
            culprit = newest_modified(self.log, list(before))
            raise LogRewrittenError(
                f"checkpoint {offset.checkpoint} consumed {files} change-log file(s) of {size} "
                f"bytes before {offset.scan.file!r} in {self.directory!r}, but {found[0]} "
                f"file(s) of {found[1]} bytes sort there now: a file was added behind the "
                f"reader's position, or a file already read was changed or deleted"
                + (f" (the most recently modified is {culprit!r})" if culprit else "")
                + ". Files may only be appended while they are the newest, and new files must "
                "sort after every existing one: undo the change, or start over with a new "
                "checkpointLocation"
            )
        return before

    def check_listing(self, listing: list[LogFile]) -> None:
        """Refuse a listing that shows data behind the head (driver, once per trigger).

        Raises
        ------
        LogOrderError
            A file the planner has not read sorts before the file it is reading.
        LogRewrittenError
            A file already read grew, shrank or disappeared.
        """
        head_key = self._key(self.head.file)
        listed = {f.name: f.size for f in listing}
        for name, size in listed.items():
            if self._key(name) >= head_key:
                continue
            known = self.finished.get(name)
            if known is None:
                raise LogOrderError(
                    name,
                    f"change-log file {name!r} appeared in {self.directory!r} after the reader "
                    f"had moved past its place: it sorts before {self.head.file!r} "
                    f"(fileOrder={self.order}), which was already read, so its changes cannot "
                    f"be delivered in log order. Name each new file so that it sorts after "
                    f"every existing one (zero-pad numbers: b0010.jsonl), or read names with "
                    f"unpadded numbers with option fileOrder=natural (on a new "
                    f"checkpointLocation); then move {name!r} out of the directory or rename "
                    f"it to sort last, and restart the query",
                )
            if size != known:
                raise self._rewritten(name, known, size)
        for name, known in self.finished.items():
            if name not in listed:
                raise self._rewritten(name, known, None)
        tail = self.closed_tail
        if tail is not None and listed.get(tail.name) != tail.size:
            raise self._rewritten(tail.name, tail.size, listed.get(tail.name))
        if self.head.file and listed.get(self.head.file, -1) < self.head.byte:
            raise self._rewritten(self.head.file, self.head.byte, listed.get(self.head.file))

    def _rewritten(self, name: str, known: int, size: int | None) -> LogRewrittenError:
        path = self.log.child(name).url
        if size is None:
            what = "was deleted"
        elif size > known:
            what = f"grew from {known} to {size} bytes after a later file was read"
        else:
            what = f"shrank from {known} to {size} bytes"
        return LogRewrittenError(
            f"change-log file {path!r} {what}, but the reader had already consumed it: its "
            f"changes would be skipped or delivered out of order. A file may only be appended "
            f"while it is the newest, and files may not be deleted or rewritten while a query "
            f"reads the log: restore the file, or start over with a new checkpointLocation"
        )

    @property
    def pending_changes(self) -> int:
        return self.assembler.unit_changes - self.base.partial

    def unit_sizes(self) -> list[int]:
        sizes = self.assembler.unit_sizes()
        if sizes:
            sizes[0] -= self.base.partial
        return sizes

    def scan(self, want: int | None, stop: LogPosition | None) -> None:
        """List the log, check it, and consume lines until ``want`` changes are pending.

        ``want`` None reads everything available (up to ``stop``).
        """
        listing = list_log_files(self.log, self.order)
        self.check_listing(listing)
        self.files = listing
        if want is not None and self.pending_changes >= want:
            return
        for chunk in read_ahead(read_chunks(self.log, listing, self.head, stop, self.order)):
            budget = None if want is None else want - self.pending_changes
            fed = self.assembler.feed(chunk, budget=budget)
            if fed.end.file != self.head.file:
                self._finish_through(fed.end.file)
            self.head = fed.end
            if fed.closed_tail:
                self.closed_tail = LogFile(fed.end.file, fed.end.byte)
            if want is not None and self.pending_changes >= want:
                break

    def _finish_through(self, reached: str) -> None:
        """Record every listed file before ``reached`` as consumed whole."""
        limit = self._key(reached)
        for f in self.files:
            if self._key(f.name) < limit:
                self.finished.setdefault(f.name, f.size)
        if self.closed_tail is not None and self._key(self.closed_tail.name) < limit:
            self.closed_tail = None

    def consumed_before(self, position: LogPosition) -> tuple[int, int]:
        """``(files, bytes)`` before ``position``'s file (all of them consumed)."""
        limit = self._key(position.file)
        sizes = [size for name, size in self.finished.items() if self._key(name) < limit]
        return len(sizes), sum(sizes)

    def files_for(self, start: LogOffset, end: LogOffset) -> list[LogFile]:
        """The listing an executor needs to replay ``(start, end]``.

        From the file of ``start``'s earliest open record through the first file after
        ``end.scan``'s: that later file is what made an unterminated tail a whole line.
        """
        low, high = self._key(start.resume.file), self._key(end.scan.file)
        out: list[LogFile] = []
        for f in self.files:
            key = self._key(f.name)
            if key < low:
                continue
            out.append(LogFile(f.name, self.finished.get(f.name, f.size)))
            if key > high:
                break
        return out

    def offset_at(self, cut: Cut, checkpoint: int) -> LogOffset:
        unit = self.assembler.unit(cut.unit)
        consumed = self.consumed_before(unit.scan)
        still_open = list(unit.open_after)
        if not cut.at_boundary:
            still_open.append((unit.txn_id, unit.first))
        still_open.sort(key=lambda item: (position_key(item[1], self.order), item[0]))
        if cut.at_boundary:
            emitted, partial = unit.order + 1, 0
        else:
            emitted = unit.order
            partial = (self.base.partial if cut.unit == 0 else 0) + cut.within
        # A cut inside a unit (gate off) has not delivered it whole: what was delivered is
        # what the unit before it left, which the base records for the first unit.
        delivered = unit.delivered if cut.at_boundary else self._delivered_before(cut.unit)
        return LogOffset(
            checkpoint,
            emitted,
            partial,
            unit.scan,
            consumed,
            tuple(still_open),
            self.order,
            delivered,
        )

    def _delivered_before(self, index: int) -> Delivered:
        """What was delivered before planned unit ``index``."""
        return self.base.delivered if index == 0 else self.assembler.unit(index - 1).delivered

    def truncate(self, units: int) -> None:
        """Forget planned units beyond the first ``units``."""
        self.assembler.truncate_units(units)

    def advance(self, cut: Cut, end: LogOffset) -> None:
        """Make ``end`` (the offset at ``cut``) the new base, dropping delivered units."""
        self.assembler.drop_units(cut.unit + 1 if cut.at_boundary else cut.unit)
        self.base = end


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
    as their events are read.
    """

    directory: Location
    source: str
    start: dict[str, Any]
    end: dict[str, Any]
    files: tuple[LogFile, ...]
    streams: tuple[PlannedUnit, ...] = ()


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
        self._planner: _Planner | None = None
        self._available_now_target: LogPosition | None = None

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
        self._planner = _Planner(self.log, restored, self.accept_resnapshot)

    def _planner_at(self, start: LogOffset) -> _Planner:
        if self._planner is None or self._planner.base != start:
            self._planner = _Planner(self.log, start, self.accept_resnapshot)
        return self._planner

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
        planner.advance(cut, end)
        return PlannedBatch(end.to_json(), partitions)

    def _split_points(self, planner: _Planner, cut: Cut) -> list[LogOffset]:
        """Offsets at transaction boundaries inside ``(base, cut)``, about evenly spaced."""
        sizes = planner.unit_sizes()[: cut.unit + 1]
        return [
            planner.offset_at(
                Cut(index, sizes[index], sum(sizes[: index + 1]), True), planner.base.checkpoint
            )
            for index in split_after(sizes, self.changes_per_partition)
        ]

    def _partitions_of(self, planner: _Planner, bounds: list[LogOffset]) -> list[object]:
        source = self.log.name
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
            )
            for lo, hi in itertools.pairwise(bounds)
        ]

    def replan(self, start: dict[str, Any], end: dict[str, Any]) -> list[object]:
        """Re-plan a logged batch after a restart: rebuild the units of ``(start, end]``."""
        first, last = self._parse(start), self._parse(end)
        planner = _Planner(self.log, first, self.accept_resnapshot)
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
        )

    def status(self) -> dict[str, Any] | None:
        """Records this run's planner skipped so far (driver, per trigger).

        Changes dropped as Debezium's repeats, tombstones, heartbeats and schema changes.
        """
        planner = self._planner
        if planner is None:
            return None
        return {"connector": self.name, "skipped": planner.assembler.skipped()}


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
) -> Iterator[pa.RecordBatch]:
    """Replay the log from ``start`` and yield the rows up to ``end`` as Arrow record batches.

    Runs on executors (once per partition) and in tests; one record batch per chunk of the log
    read. ``files`` is the listing the range was planned from (None: list the directory now).
    ``column_types`` adds the ``column_types`` column, from the lines' Kafka Connect envelopes
    (:mod:`.types`). Repeats are dropped as the planner dropped them: from what ``start``
    records as delivered, with the same ``accept_resnapshot``. ``key_columns`` makes the key of
    a change whose line has none from its image (option ``keyColumns``); ``streams`` are the range's
    large units, built into rows as their events are read.

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
            yield typed_batch(built) if column_types else pa.RecordBatch.from_struct_array(built)

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
