"""Planning on the driver: what the log holds after an offset, checked on every trigger.

The log is append-only by contract, and the reader checks it on every trigger rather than trust
it. The planner remembers the size of every file it has moved past; each trigger's listing must
show exactly those files with exactly those sizes before its position. A new file sorting there
raises :class:`~spark_ckpt.errors.LogOrderError`; a read file that grew, shrank or disappeared
raises :class:`~spark_ckpt.errors.LogRewrittenError`. After a restart the same is checked against
the offset's ``consumed`` count. Executors read the listing the plan was made from (names and
sizes travel in the partition), so what they deliver never depends on what was written since.
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_ckpt.errors import LogOrderError, LogRewrittenError
from spark_ckpt.model.schema_changes import TableSchema
from spark_ckpt.state.storage import Location

from ..debezium_format.envelope_schemas import PlannedSchemas, SchemaRow, follow_units
from ..gate import Cut
from .log_files import (
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
from .log_offset import LogOffset
from .transactions import SNAPSHOT_ID, Delivered, TransactionAssembler

__all__ = ["LogPlanner"]


class LogPlanner:
    """Driver-side planning state after a base offset: assembler, scan head, units and files.

    Besides the transactions, the planner keeps what it has read of the log: ``finished``, the
    size of every file before the head's file (all consumed), and ``closed_tail``, the head file
    when its unterminated last line was consumed because a later file existed. Every trigger's
    listing is checked against them (:meth:`check_listing`) before anything new is read.
    """

    def __init__(
        self,
        log: Location,
        base: LogOffset,
        accept_resnapshot: bool = False,
        follow_schemas: bool = False,
    ) -> None:
        self.log = log
        # Schema changes are followed where rows carry their types (columnTypes=true).
        self.follow_schemas = follow_schemas
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
        """Changes read but not yet in a batch (those of the first unit a cut split excluded)."""
        return self.assembler.unit_changes - self.base.partial

    def unit_sizes(self) -> list[int]:
        """Changes per planned unit, in order; the gate cuts between them."""
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

    def behind(self) -> tuple[int, int]:
        """``(files, bytes)`` of the last listing not read yet (past the scan head; driver)."""
        head = self._key(self.head.file)
        files = size = 0
        for f in self.files:
            key = self._key(f.name)
            if key > head or (f.name == self.head.file and f.size > self.head.byte):
                files += 1
                size += f.size - (self.head.byte if f.name == self.head.file else 0)
        return files, size

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
        """The offset that ends checkpoint ``checkpoint`` at ``cut`` (driver, once per batch)."""
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
        # Before a unit the cut splits: its rest is numbered from its start (see log_offset).
        _, schemas = self._follow_schemas(cut.unit + (1 if cut.at_boundary else 0))
        return LogOffset(
            checkpoint,
            emitted,
            partial,
            unit.scan,
            consumed,
            tuple(still_open),
            self.order,
            delivered,
            schemas,
        )

    def schema_rows(self) -> list[SchemaRow]:
        """The schema change rows of every planned unit, in order (driver, once per batch)."""
        rows, _ = self._follow_schemas(None)
        return rows

    def _follow_schemas(
        self, units: int | None
    ) -> tuple[list[SchemaRow], Mapping[str, TableSchema] | None]:
        """Follow the schemas of the first ``units`` planned units (None: all) from the base's.

        Returns the schema change rows and each table's schema after them. Only the units
        whose tables' schemas start or change are looked at.
        """
        if not self.follow_schemas:
            return [], self.base.schemas
        assembler = self.assembler
        indexes = [i for i in assembler.schema_units() if units is None or i < units]
        planned = (
            PlannedSchemas(unit.order, assembler.unit_schemas(i), unit.txn_id == SNAPSHOT_ID)
            for i, unit in ((i, assembler.unit(i)) for i in indexes)
        )
        return follow_units(self.base.schemas, planned)

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
