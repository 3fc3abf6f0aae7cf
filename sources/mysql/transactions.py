"""Transactions from the binlog's own boundaries: GTID or ``BEGIN`` ... ``XID`` or ``COMMIT``.

The binlog client's events arrive here reduced to what a transaction needs (:class:`Begin`,
:class:`Rows`, :class:`Commit`, :class:`Statement`), in binlog order; the assembler yields each
transaction once its commit event is read, with the coordinates just after that event (where
the next transaction starts). A transaction touching no captured table still moves the position
(:attr:`TransactionAssembler.passed`). Each change goes to the assembler's change store as it
arrives (:mod:`.stored_rows`), so a transaction of millions of rows is never held as a list: a
transaction is its place in the store. Runs on the driver.

Per server (MySQL's and MariaDB's replication documentation): MySQL writes a ``GTID`` (or
``ANONYMOUS_GTID``) event, then ``QUERY BEGIN``, the row events, ``XID``; MariaDB writes a
``GTID`` event that opens the transaction itself (no ``BEGIN``), the row events, ``XID``. A
non-transactional engine's changes end with ``QUERY COMMIT`` instead of ``XID``. DDL is a
``QUERY`` event of its own, committed on its own (a MariaDB GTID event flagged standalone, or
MySQL's implicit commit).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .binlog_offset import BinlogPosition
from .gtid import advance
from .stored_rows import in_memory_store, stored_row, stored_rows_of

if TYPE_CHECKING:
    from spark_ckpt.model.schema_changes import SchemaEvent

    from ..change_store import ChangeStore
    from .schemas import SchemaState

__all__ = [
    "Begin",
    "BinlogTransaction",
    "Commit",
    "RowChange",
    "Rows",
    "Statement",
    "TransactionAssembler",
]


@dataclass(frozen=True)
class RowChange:
    """One row changed: ``table`` is ``database.table``; images are JSON-ready dicts.

    ``types`` is the ``column_types`` text of the table map the row was written with (shared by
    the rows of one table map). A schema change (``op='s'``) carries its ``schema`` event
    instead of images.
    """

    table: str
    op: Literal["c", "u", "d", "s"]
    before: dict[str, object] | None
    after: dict[str, object] | None
    types: str | None = None
    schema: SchemaEvent | None = None


@dataclass(frozen=True)
class Begin:
    """A transaction opens (MySQL's ``QUERY BEGIN``, MariaDB's non-standalone GTID event)."""

    gtid: str | None = None


@dataclass(frozen=True)
class Rows:
    """A rows event's changes (one table)."""

    changes: tuple[RowChange, ...]


@dataclass(frozen=True)
class Commit:
    """``XID`` or ``QUERY COMMIT``: the open transaction is committed; ``end`` is after it."""

    end: BinlogPosition
    timestamp: int
    """The event's timestamp, seconds since the epoch (the binlog's resolution)."""


@dataclass(frozen=True)
class Statement:
    """A statement committed on its own (DDL): ``QUERY`` outside a transaction."""

    sql: str
    database: str
    end: BinlogPosition
    timestamp: int


@dataclass(frozen=True)
class BinlogTransaction:
    """A committed transaction's captured changes, and where the binlog continues after it.

    Its changes are positions ``first .. first + size - 1`` of ``store``.
    """

    gtid: str | None
    commit_ts_us: int
    end: BinlogPosition
    store: ChangeStore = field(compare=False, repr=False)
    first: int
    size: int
    schemas: SchemaState | None = None
    """The captured tables' schemas as delivered up to this transaction's end."""
    gtid_state: str | None = None
    """The server's GTID state just after this transaction (:mod:`.gtid`), where it has GTIDs."""

    @property
    def txn_id(self) -> str:
        """Its ``txn_id``: the GTID, or the position after it on a server without GTIDs."""
        return self.gtid or str(self.end)

    def rows(self) -> Iterator[dict[str, str | None]]:
        """Its changes as the store keeps them, read back a chunk at a time (driver: windows)."""
        return stored_rows_of(self.store.spans(self.first, self.size))


@dataclass
class TransactionAssembler:
    """Groups events into transactions (driver, per event read).

    ``keys`` are the captured tables' key columns (a change's ``key`` text); ``store`` where
    the changes go (a read gives each its own, see :mod:`.stored_rows`).
    """

    keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    store: ChangeStore = field(default_factory=in_memory_store)
    open_gtid: str | None = None
    is_open: bool = False
    pending: int = 0
    """Changes of the open transaction in the store (from :attr:`first`)."""
    first: int = 0
    passed: BinlogPosition | None = None
    """The coordinates after the last commit read, captured or not."""
    gtid_state: str | None = None
    """The GTID state after the last commit read, captured or not: the read's start state,
    advanced by each transaction's and each standalone statement's GTID."""

    def begin(self, event: Begin) -> None:
        """A transaction opens (a second BEGIN without a commit keeps the first open)."""
        if not self.is_open:
            self.is_open, self.open_gtid, self.pending = True, event.gtid, 0

    def rows(self, event: Rows) -> None:
        """Changes of the open transaction (row events open one when no BEGIN came first).

        Raises
        ------
        KeyError
            When a change's table is not among :attr:`keys` (not captured).
        """
        if not self.is_open:
            self.begin(Begin())
        for change in event.changes:
            position = self.store.append(stored_row(change, self.keys[change.table]))
            if not self.pending:
                self.first = position
            self.pending += 1

    def stored(self, rows: list[tuple[str | None, ...]]) -> None:
        """Changes of the open transaction, already in the store's columns.

        The native decoder renders them (:mod:`._native`); row events open a transaction when
        no BEGIN came first.
        """
        if not self.is_open:
            self.begin(Begin())
        for row in rows:
            position = self.store.append(row)
            if not self.pending:
                self.first = position
            self.pending += 1

    def commit(self, event: Commit) -> BinlogTransaction | None:
        """The open transaction, committed; None when it captured nothing."""
        size, gtid = self.pending, self.open_gtid
        self.is_open, self.open_gtid, self.pending = False, None, 0
        self.passed = event.end
        if gtid is not None:
            self.gtid_state = advance(self.gtid_state, gtid)
        if not size:
            return None
        return BinlogTransaction(
            gtid,
            event.timestamp * 1_000_000,
            event.end,
            self.store,
            self.first,
            size,
            gtid_state=self.gtid_state,
        )

    def statement(self, event: Statement) -> None:
        """A statement committed on its own: it moves the position, and closes nothing open."""
        if not self.is_open:
            self.passed = event.end
            # The statement's own GTID event came just before it (MariaDB's standalone GTID,
            # MySQL's GTID before DDL).
            if self.open_gtid is not None:
                self.gtid_state = advance(self.gtid_state, self.open_gtid)
            self.open_gtid = None

    def discard_open(self) -> None:
        """Forget a transaction still open: the next read starts at :attr:`passed`, before it.

        What it put in the store stays there, unreferenced (the store goes as a whole).
        """
        self.is_open, self.open_gtid, self.pending = False, None, 0

    @property
    def held_changes(self) -> int:
        """Changes read of a transaction whose commit is not read yet."""
        return self.pending
