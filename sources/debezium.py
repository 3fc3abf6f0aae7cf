"""The ``debezium-json`` connector: a directory of Debezium-format ``*.jsonl`` change files.

Offsets
-------
An offset is the state of the transaction assembler at a cut, small enough to live in Spark's
offset log::

    {"v": 1, "checkpoint": 7, "emitted": 120, "partial": 0,
     "scan": ["0003.jsonl", 52311, 804],
     "open": [["tx-981", "0003.jsonl", 50022, 790], ...]}

``emitted`` transactions (in END order) are before the cut, plus ``partial`` events of the next
one (always 0 unless the gate is off). ``scan`` is how far the log was consumed; ``open`` lists the
transactions consumed in part but not emitted, with the position of their first record. To resume
at an offset, the log is re-read from the earliest open record to ``scan`` keeping only records
of the open transactions, then normally from ``scan``: the same ``(start, end)`` always yields the
same rows, because the log is append-only.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spark_ckpt.availability import AVAILABLE, SnapshotAvailability
from spark_ckpt.errors import LogRewrittenError, RestoreError, SourcePathError

from .connector import ChangeConnector, Plan
from .debezium_events import ChangeEvent
from .gate import Cut
from .log_files import START, LogPosition, list_log_files, read_lines
from .schema import RowBuffer, json_text
from .transactions import Transaction, TransactionAssembler

__all__ = ["DebeziumJsonConnector", "LogOffset", "read_range"]

_VERSION = 1


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
    open
        ``(txn_id, first record position)`` of transactions consumed but not fully emitted,
        ordered by first position.
    """

    checkpoint: int
    emitted: int
    partial: int
    scan: LogPosition
    open: tuple[tuple[str, LogPosition], ...]

    @property
    def resume(self) -> LogPosition:
        """Where re-reading must start to rebuild the state at this offset."""
        return min([first for _, first in self.open], default=self.scan)

    def to_json(self) -> dict[str, Any]:
        """Render with a fixed key order (Spark compares offsets as JSON strings)."""
        return {
            "v": _VERSION,
            "checkpoint": self.checkpoint,
            "emitted": self.emitted,
            "partial": self.partial,
            "scan": self.scan.to_json(),
            "open": [[txn_id, *first.to_json()] for txn_id, first in self.open],
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> LogOffset:
        """Parse an offset written by :meth:`to_json`.

        Raises
        ------
        ValueError
            When ``value`` is not such an offset (for example a checkpoint of another source).
        """
        try:
            if value.get("v") != _VERSION:
                raise ValueError(f"unsupported offset version {value.get('v')!r}")
            open_items = tuple(
                (str(item[0]), LogPosition.from_json(list(item[1:]))) for item in value["open"]
            )
            return cls(
                int(value["checkpoint"]),
                int(value["emitted"]),
                int(value["partial"]),
                LogPosition.from_json(value["scan"]),
                open_items,
            )
        except (KeyError, TypeError, IndexError, AttributeError) as e:
            raise ValueError(f"not a debezium-json offset: {value!r}") from e


INITIAL = LogOffset(-1, 0, 0, START, ())


@dataclass(frozen=True)
class _Unit:
    """An emitted transaction in the plan, with what an offset right after it needs."""

    txn: Transaction
    scan: LogPosition
    # Transactions still open once every transaction released together with this one has
    # been emitted; shared by the whole release group.
    open_after_group: tuple[tuple[str, LogPosition], ...]
    # The later members of the same release group (still open right after this unit).
    later_in_group: tuple[Transaction, ...]

    def open_after(self, *, include_self: bool) -> tuple[tuple[str, LogPosition], ...]:
        items = list(self.open_after_group)
        items += [(t.txn_id, t.first) for t in self.later_in_group]
        if include_self:
            items.append((self.txn.txn_id, self.txn.first))
        return tuple(sorted(items, key=lambda item: (item[1], item[0])))


class _Planner:
    """Driver-side planning state after a base offset: assembler, scan head and units."""

    def __init__(self, directory: str, base: LogOffset) -> None:
        self.directory = directory
        self.base = base
        self.assembler = TransactionAssembler(base.emitted, keep_events=False)
        self.units: list[_Unit] = []
        self._unit_changes = 0  # sum of the units' sizes, kept up to date (checked per line)
        only = {txn_id for txn_id, _ in base.open}
        released: list[Transaction] = []
        if only:
            for line in read_lines(directory, base.resume, stop=base.scan):
                released += self.assembler.feed(line, only)
        self._add_group(released, base.scan)
        self.head = base.scan

    def _add_group(self, group: list[Transaction], scan: LogPosition) -> None:
        if not group:
            return
        still_open = tuple(self.assembler.open_items())
        for index, txn in enumerate(group):
            self.units.append(_Unit(txn, scan, still_open, tuple(group[index + 1 :])))
            self._unit_changes += txn.size

    @property
    def pending_changes(self) -> int:
        return self._unit_changes - self.base.partial

    def unit_sizes(self) -> list[int]:
        sizes = [u.txn.size for u in self.units]
        if sizes:
            sizes[0] -= self.base.partial
        return sizes

    def scan(self, want: int | None, stop: LogPosition | None) -> None:
        """Consume lines until ``want`` changes are pending (None: all available)."""
        if want is not None and self.pending_changes >= want:
            return
        for line in read_lines(self.directory, self.head, stop=stop):
            self.head = line.end
            self._add_group(self.assembler.feed(line), line.end)
            if want is not None and self.pending_changes >= want:
                return

    def offset_at(self, cut: Cut, checkpoint: int) -> LogOffset:
        unit = self.units[cut.unit]
        if cut.at_boundary:
            return LogOffset(
                checkpoint, unit.txn.order + 1, 0, unit.scan, unit.open_after(include_self=False)
            )
        already = self.base.partial if cut.unit == 0 else 0
        return LogOffset(
            checkpoint,
            unit.txn.order,
            already + cut.within,
            unit.scan,
            unit.open_after(include_self=True),
        )

    def truncate(self, units: int) -> None:
        """Forget planned units beyond the first ``units``."""
        self._unit_changes -= sum(u.txn.size for u in self.units[units:])
        del self.units[units:]

    def advance(self, cut: Cut, end: LogOffset) -> None:
        """Make ``end`` (the offset at ``cut``) the new base, dropping delivered units."""
        drop = cut.unit + 1 if cut.at_boundary else cut.unit
        self._unit_changes -= sum(u.txn.size for u in self.units[:drop])
        del self.units[:drop]
        self.base = end


@dataclass(frozen=True)
class DebeziumPartition:
    """The picklable value of one input partition: read ``(start, end]`` of the log."""

    directory: str
    source: str
    start: dict[str, Any]
    end: dict[str, Any]


class DebeziumJsonConnector(ChangeConnector):
    """Reads a directory of Debezium change-event files as whole transactions.

    Parameters
    ----------
    directory
        The change-log directory (option ``path``).
    changes_per_partition
        Split a batch into partitions of about this many changes, at transaction boundaries.
    """

    name = "debezium-json"

    def __init__(self, directory: str, changes_per_partition: int = 50_000) -> None:
        self.directory = directory
        self.changes_per_partition = changes_per_partition
        self._planner: _Planner | None = None
        self._available_now_target: LogPosition | None = None
        # Partition split points computed while planning, keyed by (start, end) JSON.
        self._splits: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def check(self) -> None:
        """Fail early (driver, once) when the directory is missing or unreadable."""
        list_log_files(self.directory)

    # -- driver: planning ---------------------------------------------------------------------

    def initial_offset(self) -> dict[str, Any]:
        """Start at the beginning of the log."""
        return INITIAL.to_json()

    def resume(self, offset: dict[str, Any]) -> None:
        """Check that the log still holds everything from ``offset`` on (driver, once per run).

        The restored offset must be re-readable from its earliest open transaction: the files it
        names must exist and be at least as long as the positions recorded. A log rotated away or
        truncated since the checkpoint would otherwise be skipped silently.
        """
        restored = _parse_offset(offset)
        positions = [restored.scan, *(first for _, first in restored.open)]
        for position in positions:
            if not position.file:
                continue
            path = os.path.join(self.directory, position.file)
            try:
                size = os.path.getsize(path)
            except FileNotFoundError:
                raise RestoreError(
                    f"the restored checkpoint {restored.checkpoint} continues reading {path!r} "
                    f"at byte {position.byte}, but the file is gone: changes after the checkpoint "
                    f"would be skipped. Restore the file, or start over with a new "
                    f"checkpointLocation"
                ) from None
            if size < position.byte:
                raise RestoreError(
                    f"the restored checkpoint {restored.checkpoint} continues reading {path!r} "
                    f"at byte {position.byte}, but the file has only {size} bytes: it was "
                    f"truncated or rewritten since (files may only be appended). Restore the "
                    f"file, or start over with a new checkpointLocation"
                )

    def _planner_at(self, start: LogOffset) -> _Planner:
        if self._planner is None or self._planner.base != start:
            self._planner = _Planner(self.directory, start)
        return self._planner

    def plan(self, start: dict[str, Any], max_changes: int | None) -> Plan:
        """Read ahead from ``start`` until ``max_changes`` changes are in complete transactions."""
        planner = self._planner_at(_parse_offset(start))
        planner.scan(max_changes, self._available_now_target)
        held: SnapshotAvailability | None = None
        reason = planner.assembler.holdup()
        if reason is not None:
            held = SnapshotAvailability.soft_failure(reason)
        return Plan(planner.unit_sizes(), held, planner.assembler.held_events)

    def availability(self, cut: Cut) -> SnapshotAvailability:
        """Available exactly at transaction boundaries."""
        if cut.at_boundary:
            return AVAILABLE
        assert self._planner is not None
        txn = self._planner.units[cut.unit].txn
        done = cut.within + (self._planner.base.partial if cut.unit == 0 else 0)
        return SnapshotAvailability.soft_failure(
            f"the cut would split transaction {txn.txn_id!r} after {done} of its {txn.size} "
            f"change events"
        )

    def end_offset(self, cut: Cut, checkpoint_id: int) -> dict[str, Any]:
        """Return the offset at ``cut`` and make it the base of the next plan."""
        planner = self._planner
        assert planner is not None
        start = planner.base
        end = planner.offset_at(cut, checkpoint_id)
        splits = self._split_points(planner, cut)
        planner.advance(cut, end)
        start_json, end_json = start.to_json(), end.to_json()
        self._splits = {(json.dumps(start_json), json.dumps(end_json)): splits}
        return end_json

    def _split_points(self, planner: _Planner, cut: Cut) -> list[dict[str, Any]]:
        """Offsets at transaction boundaries inside ``(base, cut)``, about evenly spaced."""
        points: list[dict[str, Any]] = []
        sizes = planner.unit_sizes()
        done = since_split = 0
        for index in range(cut.unit):
            done += sizes[index]
            since_split += sizes[index]
            if since_split >= self.changes_per_partition and done < cut.changes:
                boundary = Cut(index, sizes[index], done, True)
                points.append(planner.offset_at(boundary, planner.base.checkpoint).to_json())
                since_split = 0
        return points

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[object]:
        """One partition per run of about ``changes_per_partition`` changes."""
        if start == end:
            return []
        splits = self._splits.get((json.dumps(start), json.dumps(end)))
        if splits is None:
            splits = self._replan_splits(_parse_offset(start), _parse_offset(end))
        bounds = [start, *splits, end]
        source = os.path.basename(os.path.normpath(self.directory))
        return [
            DebeziumPartition(self.directory, source, lo, hi)
            for lo, hi in itertools.pairwise(bounds)
        ]

    def _replan_splits(self, start: LogOffset, end: LogOffset) -> list[dict[str, Any]]:
        # After a restart Spark re-plans the logged batch: rebuild the units of (start, end).
        planner = _Planner(self.directory, start)
        planner.scan(None, end.scan)
        total = end.emitted - start.emitted
        needed = total + (1 if end.partial else 0)
        if len(planner.units) < needed:
            raise LogRewrittenError(
                f"re-planning the logged batch up to {end.scan} found {len(planner.units)} "
                f"complete transactions after the start offset, not {needed}: the change log in "
                f"{self.directory!r} was modified in place (files may only be appended or added)"
            )
        planner.truncate(needed)
        sizes = planner.unit_sizes()
        if not sizes:
            return []
        last = needed - 1
        if end.partial:
            within = end.partial - (start.partial if last == 0 else 0)
            cut = Cut(last, within, sum(sizes[:last]) + within, False)
        else:
            cut = Cut(last, sizes[last], sum(sizes), True)
        return self._split_points(planner, cut)

    def prepare_available_now(self) -> None:
        """Fix the end of the last file now as the target of ``Trigger.availableNow``."""
        files = list_log_files(self.directory)
        if not files:
            self._available_now_target = START
            return
        last = files[-1]
        try:
            size = os.path.getsize(os.path.join(self.directory, last))
        except OSError as e:
            raise SourcePathError(f"cannot read change-log file {last!r}: {e.strerror}") from e
        self._available_now_target = LogPosition(last, size, 0)

    # -- executors: reading -------------------------------------------------------------------

    def read(self, partition: object) -> Iterator[pa.RecordBatch]:
        """Yield the rows of ``(start, end]`` (executor, once per task)."""
        assert isinstance(partition, DebeziumPartition)
        return read_range(
            partition.directory,
            _parse_offset(partition.start),
            _parse_offset(partition.end),
            partition.source,
        )


def _parse_offset(value: dict[str, Any]) -> LogOffset:
    try:
        return LogOffset.from_json(value)
    except ValueError as e:
        raise LogRewrittenError(
            f"the checkpoint holds an offset that the debezium-json connector cannot read "
            f"({e}); was this checkpoint location written by another source? Use a new "
            f"checkpointLocation"
        ) from e


def _rows(txn: Transaction, skip: int, take: int, fallback_source: str) -> Iterator[list[object]]:
    ts_us = txn.commit_ts_ms * 1000 if txn.commit_ts_ms is not None else None
    events: Sequence[ChangeEvent] = txn.events
    for index in range(skip, take):
        event = events[index]
        obj = event.event
        source = obj.get("source")
        name = source.get("name") if isinstance(source, dict) else None
        yield [
            name if isinstance(name, str) else fallback_source,
            txn.txn_id,
            txn.order,
            txn.size,
            index,
            ts_us,
            event.table,
            event.op,
            json_text(obj.get("key")),
            json_text(obj.get("before")),
            json_text(obj.get("after")),
        ]


def read_range(
    directory: str, start: LogOffset, end: LogOffset, source: str = "debezium-json"
) -> Iterator[pa.RecordBatch]:
    """Replay the log from ``start`` and yield the rows up to ``end`` as Arrow record batches.

    Runs on executors (once per partition) and in tests.

    Raises
    ------
    LogRewrittenError
        When the log no longer contains what ``end`` was planned from.
    """
    assembler = TransactionAssembler(start.emitted, keep_events=True)
    only = {txn_id for txn_id, _ in start.open}
    released: list[Transaction] = []
    if only:
        for line in read_lines(directory, start.resume, stop=start.scan):
            released += assembler.feed(line, only)
    buffer = RowBuffer()
    last = (end.emitted, end.partial)

    def emit(group: list[Transaction]) -> Iterator[pa.RecordBatch]:
        for txn in group:
            if (txn.order, 0) >= last:
                return
            skip = start.partial if txn.order == start.emitted else 0
            take = end.partial if txn.order == end.emitted else txn.size
            for row in _rows(txn, skip, take, source):
                buffer.append(row)
                if buffer.full:
                    yield buffer.flush()

    reached = start.emitted
    yield from emit(released)
    reached = max(reached, assembler.next_order)
    if reached < end.emitted + (1 if end.partial else 0):
        for line in read_lines(directory, start.scan, stop=end.scan):
            group = assembler.feed(line)
            if group:
                yield from emit(group)
                if assembler.next_order >= end.emitted + (1 if end.partial else 0):
                    break
    if assembler.next_order < end.emitted + (1 if end.partial else 0):
        raise LogRewrittenError(
            f"replaying {directory!r} from {start.scan} to {end.scan} produced transactions "
            f"up to #{assembler.next_order - 1}, but the batch was planned up to #"
            f"{end.emitted - (0 if end.partial else 1)}: the change log was modified in place "
            f"(files may only be appended or added); restore the original files"
        )
    if len(buffer):
        yield buffer.flush()
