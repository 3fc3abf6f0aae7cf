"""Transactions from the binlog's own boundaries: GTID or ``BEGIN`` ... ``XID`` or ``COMMIT``.

The binlog client's events arrive here reduced to what a transaction needs (:class:`Begin`,
:class:`Rows`, :class:`Commit`, :class:`Statement`), in binlog order; the assembler yields each
transaction once its commit event is read, with the coordinates just after that event (where
the next transaction starts). A transaction touching no captured table still moves the position
(:attr:`TransactionAssembler.passed`). Pure Python; runs on the driver.

Per server (MySQL's and MariaDB's replication documentation): MySQL writes a ``GTID`` (or
``ANONYMOUS_GTID``) event, then ``QUERY BEGIN``, the row events, ``XID``; MariaDB writes a
``GTID`` event that opens the transaction itself (no ``BEGIN``), the row events, ``XID``. A
non-transactional engine's changes end with ``QUERY COMMIT`` instead of ``XID``. DDL is a
``QUERY`` event of its own, committed on its own (a MariaDB GTID event flagged standalone, or
MySQL's implicit commit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .binlog_offset import BinlogPosition
from .gtid import advance

if TYPE_CHECKING:
    from spark_ckpt.model.schema_changes import SchemaEvent

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
    """A committed transaction's captured changes, and where the binlog continues after it."""

    gtid: str | None
    commit_ts_us: int
    changes: tuple[RowChange, ...]
    end: BinlogPosition
    schemas: SchemaState | None = None
    """The captured tables' schemas as delivered up to this transaction's end."""
    gtid_state: str | None = None
    """The server's GTID state just after this transaction (:mod:`.gtid`), where it has GTIDs."""


@dataclass
class TransactionAssembler:
    """Groups events into transactions (driver, per event read)."""

    open_gtid: str | None = None
    is_open: bool = False
    pending: list[RowChange] = field(default_factory=list)
    passed: BinlogPosition | None = None
    """The coordinates after the last commit read, captured or not."""
    gtid_state: str | None = None
    """The GTID state after the last commit read, captured or not: the read's start state,
    advanced by each transaction's and each standalone statement's GTID."""

    def begin(self, event: Begin) -> None:
        """A transaction opens (a second BEGIN without a commit keeps the first open)."""
        if not self.is_open:
            self.is_open, self.open_gtid, self.pending = True, event.gtid, []

    def rows(self, event: Rows) -> None:
        """Changes of the open transaction (row events open one when no BEGIN came first)."""
        if not self.is_open:
            self.begin(Begin())
        self.pending.extend(event.changes)

    def commit(self, event: Commit) -> BinlogTransaction | None:
        """The open transaction, committed; None when it captured nothing."""
        changes, gtid = tuple(self.pending), self.open_gtid
        self.is_open, self.open_gtid, self.pending = False, None, []
        self.passed = event.end
        if gtid is not None:
            self.gtid_state = advance(self.gtid_state, gtid)
        if not changes:
            return None
        return BinlogTransaction(
            gtid, event.timestamp * 1_000_000, changes, event.end, gtid_state=self.gtid_state
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
        """Forget a transaction still open: the next read starts at :attr:`passed`, before it."""
        self.is_open, self.open_gtid, self.pending = False, None, []

    @property
    def held_changes(self) -> int:
        """Changes read of a transaction whose commit is not read yet."""
        return len(self.pending)
