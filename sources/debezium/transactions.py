"""Assembling whole transactions from an interleaved change log.

Records of different transactions may interleave, a transaction may span files, and change events
may arrive before their ``BEGIN`` or after their ``END``. A transaction is complete when its
``END`` has been read and all of its ``event_count`` change events are present; a change outside
any transaction is a transaction of its own, complete at once. Complete transactions are emitted
in the order their ``END`` was read: a complete transaction waits behind an earlier-ended one
that is still incomplete.

Pure Python; runs on the driver (planning, without keeping event payloads) and on executors
(reading, keeping them).
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field

from spark_ckpt.errors import DuplicateTransactionError, EventCountMismatchError

from .events import ChangeEvent, TransactionMarker, parse_line
from .log_files import LogLine, LogPosition

__all__ = ["Transaction", "TransactionAssembler"]

_RECENT_WINDOW = 100_000


@dataclass
class _End:
    event_count: int
    collections: dict[str, int] | None
    ts_ms: int | None
    where: tuple[str, int]


@dataclass
class _Open:
    txn_id: str
    first: LogPosition
    began: tuple[str, int] | None = None
    end: _End | None = None
    count: int = 0
    orders: set[int] = field(default_factory=set)
    tables: Counter[str] = field(default_factory=Counter)
    events: list[ChangeEvent] = field(default_factory=list)
    max_ts: int | None = None

    @property
    def complete(self) -> bool:
        return self.end is not None and self.count == self.end.event_count


@dataclass(frozen=True)
class Transaction:
    """A complete transaction, emitted in END order.

    Attributes
    ----------
    order
        Its position in the emitted sequence (``txn_order``), counted from the log start.
    txn_id
        The source's transaction id (``file:line`` for a change outside any transaction).
    size
        Number of change events.
    first
        Position of its first record in the log.
    commit_ts_ms
        Commit time: the END's ``ts_ms``, else the latest ``source.ts_ms`` of its events.
    events
        Its change events in transaction order (empty when the assembler keeps no payloads).
    """

    order: int
    txn_id: str
    size: int
    first: LogPosition
    commit_ts_ms: int | None
    events: tuple[ChangeEvent, ...]


class TransactionAssembler:
    """Feeds log lines in order and emits complete transactions in END order.

    Parameters
    ----------
    first_order
        ``order`` of the next transaction emitted.
    keep_events
        Keep change-event payloads (executors) or only count them (driver planning).
    """

    def __init__(self, first_order: int = 0, *, keep_events: bool = True) -> None:
        self.next_order = first_order
        self._keep = keep_events
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._ended: deque[str] = deque()
        self._recent: set[str] = set()
        self._recent_order: deque[str] = deque()

    # -- state ------------------------------------------------------------------------------

    def open_items(self) -> list[tuple[str, LogPosition]]:
        """Transactions read (at least in part) but not emitted, as ``(id, first position)``."""
        return [(t.txn_id, t.first) for t in self._open.values()]

    @property
    def held_events(self) -> int:
        """Change events read but not emitted."""
        return sum(t.count for t in self._open.values())

    def holdup(self) -> str | None:
        """Why nothing more can be emitted now, in words (None when nothing is held back)."""
        if not self._open:
            return None
        if self._ended:
            head = self._open[self._ended[0]]
            assert head.end is not None
            return (
                f"transaction {head.txn_id!r} (first record {head.first}) has ended but only "
                f"{head.count} of its {head.end.event_count} change events have been read; "
                f"{len(self._ended) - 1} later-ended transaction(s) wait behind it"
            )
        oldest = next(iter(self._open.values()))
        return (
            f"transaction {oldest.txn_id!r} (first record {oldest.first}) has {oldest.count} "
            f"change event(s) but its END has not been read yet"
        )

    # -- feeding ----------------------------------------------------------------------------

    def feed(self, line: LogLine, only: set[str] | None = None) -> list[Transaction]:
        """Consume one log line; return the transactions it lets out, in END order.

        Parameters
        ----------
        line
            The next line of the log.
        only
            When resuming from an offset: consume only records of these transaction ids (the
            ones the offset lists as open) and skip the rest, which were emitted before it.
        """
        record = parse_line(line)
        where = line.where
        if isinstance(record, TransactionMarker):
            if only is not None and record.txn_id not in only:
                return []
            self._marker(record, line.start, where)
        else:
            txn_id = record.txn_id
            if txn_id is None:
                txn_id = f"{where[0]}:{where[1]}"
                if only is not None and txn_id not in only:
                    return []
                txn = self._begin_txn(txn_id, line.start, where)
                txn.end = _End(1, None, None, where)
            elif only is not None and txn_id not in only:
                return []
            self._change(txn_id, record, line.start, where)
            if record.txn_id is None:
                self._ended.append(txn_id)
        return self._release()

    def _begin_txn(self, txn_id: str, pos: LogPosition, where: tuple[str, int]) -> _Open:
        txn = self._open.get(txn_id)
        if txn is None:
            if txn_id in self._recent:
                raise DuplicateTransactionError(
                    where[0],
                    where[1],
                    f"a record of transaction {txn_id!r}, which was already complete and emitted",
                    "each transaction id to be used by one transaction only",
                )
            txn = self._open[txn_id] = _Open(txn_id, pos)
        return txn

    def _marker(self, marker: TransactionMarker, pos: LogPosition, where: tuple[str, int]) -> None:
        txn = self._begin_txn(marker.txn_id, pos, where)
        if marker.status == "BEGIN":
            if txn.began is not None or txn.end is not None:
                seen = txn.began or (txn.end.where if txn.end else where)
                raise DuplicateTransactionError(
                    where[0],
                    where[1],
                    f"a second BEGIN of transaction {marker.txn_id!r} (already seen at "
                    f"{seen[0]}:{seen[1]})",
                    "one BEGIN and one END per transaction id",
                )
            txn.began = where
            return
        if txn.end is not None:
            raise DuplicateTransactionError(
                where[0],
                where[1],
                f"a second END of transaction {marker.txn_id!r} (first END at "
                f"{txn.end.where[0]}:{txn.end.where[1]})",
                "one BEGIN and one END per transaction id",
            )
        assert marker.event_count is not None
        if txn.count > marker.event_count:
            raise EventCountMismatchError(
                where[0],
                where[1],
                f"END of transaction {marker.txn_id!r} says event_count={marker.event_count} "
                f"but {txn.count} of its change events were already read",
                "event_count to equal the number of change events of the transaction",
            )
        for order in txn.orders:
            if order > marker.event_count:
                raise EventCountMismatchError(
                    where[0],
                    where[1],
                    f"END of transaction {marker.txn_id!r} says event_count="
                    f"{marker.event_count} but an event with total_order={order} was read",
                    "total_order to run from 1 to event_count",
                )
        txn.end = _End(marker.event_count, marker.collections, marker.ts_ms, where)
        self._ended.append(marker.txn_id)
        self._check_collections(txn, where)

    def _change(
        self, txn_id: str, event: ChangeEvent, pos: LogPosition, where: tuple[str, int]
    ) -> None:
        txn = self._begin_txn(txn_id, pos, where)
        end = txn.end
        if end is not None and txn.count + 1 > end.event_count:
            raise EventCountMismatchError(
                where[0],
                where[1],
                f"change event {txn.count + 1} of transaction {txn_id!r} exceeds the "
                f"event_count={end.event_count} of its END at {end.where[0]}:{end.where[1]}",
                "event_count to equal the number of change events of the transaction",
            )
        order = event.total_order
        if order is not None:
            if order in txn.orders:
                raise EventCountMismatchError(
                    where[0],
                    where[1],
                    f"a second change event with total_order={order} in transaction {txn_id!r}",
                    "each total_order to occur once per transaction",
                )
            if end is not None and order > end.event_count:
                raise EventCountMismatchError(
                    where[0],
                    where[1],
                    f"total_order={order} exceeds the event_count={end.event_count} of "
                    f"transaction {txn_id!r}",
                    "total_order to run from 1 to event_count",
                )
            txn.orders.add(order)
        txn.count += 1
        txn.tables[event.table] += 1
        if event.ts_ms is not None and (txn.max_ts is None or event.ts_ms > txn.max_ts):
            txn.max_ts = event.ts_ms
        if self._keep:
            txn.events.append(event)
        self._check_collections(txn, where)

    @staticmethod
    def _check_collections(txn: _Open, where: tuple[str, int]) -> None:
        end = txn.end
        if end is None or end.collections is None or not txn.complete:
            return
        seen = {name: n for name, n in txn.tables.items() if n}
        if seen != end.collections:
            raise EventCountMismatchError(
                where[0],
                where[1],
                f"transaction {txn.txn_id!r} has change events per table {seen} but its END at "
                f"{end.where[0]}:{end.where[1]} lists data_collections {end.collections}",
                "data_collections event counts to match the change events per table",
            )

    def _release(self) -> list[Transaction]:
        out: list[Transaction] = []
        while self._ended:
            head = self._open[self._ended[0]]
            if not head.complete:
                break
            self._ended.popleft()
            del self._open[head.txn_id]
            self._remember(head.txn_id)
            if head.count == 0:
                continue  # an empty transaction changes nothing and is not emitted
            assert head.end is not None
            events: tuple[ChangeEvent, ...] = ()
            if self._keep:
                indexed = enumerate(head.events)
                ranked = sorted(
                    indexed,
                    key=lambda p: (p[1].total_order is None, p[1].total_order or 0, p[0]),
                )
                events = tuple(e for _, e in ranked)
            ts = head.end.ts_ms if head.end.ts_ms is not None else head.max_ts
            out.append(
                Transaction(self.next_order, head.txn_id, head.count, head.first, ts, events)
            )
            self.next_order += 1
        return out

    def _remember(self, txn_id: str) -> None:
        # A bounded window of completed ids, to catch a transaction id reused soon after.
        self._recent.add(txn_id)
        self._recent_order.append(txn_id)
        if len(self._recent_order) > _RECENT_WINDOW:
            self._recent.discard(self._recent_order.popleft())
