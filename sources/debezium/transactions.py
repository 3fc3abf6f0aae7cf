"""Assembling whole transactions from an interleaved change log, chunk by chunk.

Records of different transactions may interleave, a transaction may span files, and change events
may arrive before their ``BEGIN`` or after their ``END``. A transaction is complete when its
``END`` has been read and all of its ``event_count`` change events are present; a change outside
any transaction is a transaction of its own, complete at once. Complete transactions are emitted
in the order their ``END`` was read: a complete transaction waits behind an earlier-ended one
that is still incomplete.

The per-line work (JSON decoding, the checks, the assembly and the output rows) runs in the
shared Debezium format's native module (``sources/debezium_format/native``, Rust): Python
decoding cost about 30 us of CPU per line, several times Spark's own cost of carrying a row.
This module is its typed face for the log files: it feeds :class:`~.log_files.LogChunk` s and
turns what comes back into positions. While
planning, released transactions stay in the native module as units until a batch delivers them
(most never become an offset, so they need no Python object).

Runs on the driver (planning, without keeping event payloads) and on executors (reading, where
released transactions become rows without passing through Python).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import pyarrow as pa

from ..debezium_format._native import Assembler
from .log_files import LogChunk, LogPosition

__all__ = ["SNAPSHOT_ID", "Delivered", "Feed", "PlannedUnit", "TransactionAssembler"]

SNAPSHOT_ID = "snapshot"
"""The ``txn_id`` of Debezium's initial snapshot, delivered as one unit (the native
``assembler.rs``'s ``SNAPSHOT_ID``)."""


class Delivered(NamedTuple):
    """What was delivered up to a point, as far as recognising Debezium's repeats needs it.

    Attributes
    ----------
    high
        The furthest source position of a delivered transaction (:mod:`.native`'s
        ``dialect.rs`` renders each connector's position as comparable text); a transaction at
        or before it is a repeat. None before any, or for logs without positions.
    snapshot
        ``(position, streamed_after)`` once an initial snapshot was delivered: its position and
        whether changes were delivered after it; None before.
    """

    high: str | None = None
    snapshot: tuple[str | None, bool] | None = None


NOTHING_DELIVERED = Delivered()


class PlannedUnit(NamedTuple):
    """A released transaction in the plan, with what an offset right after it needs.

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
    scan
        Where the log had been read to when it was released.
    open_after
        Transactions still open right after it (itself not included), as ``(id, first)``.
    delivered
        What was delivered up to and including it.
    commit_ts_ms
        Its commit time (the END's ``ts_ms``, else its newest event's), epoch milliseconds.
    """

    order: int
    txn_id: str
    size: int
    first: LogPosition
    scan: LogPosition
    open_after: list[tuple[str, LogPosition]]
    delivered: Delivered
    commit_ts_ms: int | None


class Feed(NamedTuple):
    """What one chunk fed.

    ``end`` is the position after the last line consumed; ``closed_tail``, whether that line
    was a closed file's unterminated tail.
    """

    end: LogPosition
    closed_tail: bool


class TransactionAssembler:
    """Feeds log chunks in order and emits complete transactions in END order.

    Parameters
    ----------
    first_order
        ``order`` of the next transaction emitted.
    keep_events
        Keep change-event payloads and build rows (executors) or only count them (driver).
    delivered
        What was delivered before ``first_order`` (an offset's record of it).
    accept_resnapshot
        Deliver a repeated initial snapshot instead of raising
        :class:`~spark_ckpt.errors.RepeatedSnapshotError` (option ``resnapshot=accept``).
    """

    def __init__(
        self,
        first_order: int = 0,
        *,
        keep_events: bool = True,
        delivered: Delivered = NOTHING_DELIVERED,
        accept_resnapshot: bool = False,
    ) -> None:
        self._native = Assembler(
            first_order,
            keep_events=keep_events,
            delivered=(delivered.high, delivered.snapshot),
            accept_resnapshot=accept_resnapshot,
        )

    @property
    def next_order(self) -> int:
        """``order`` of the next transaction emitted."""
        return self._native.next_order

    @property
    def held_events(self) -> int:
        """Change events read but not emitted."""
        return self._native.held_events

    def holdup(self) -> str | None:
        """Why nothing more can be emitted now, in words (None when nothing is held back)."""
        return self._native.holdup()

    @property
    def held_transactions(self) -> int:
        """Open transactions (an initial snapshot in progress counts as one)."""
        return self._native.held_transactions

    def oldest_open(self) -> tuple[str, LogPosition] | None:
        """The oldest open transaction and the position of its first record, if any."""
        oldest = self._native.oldest_open()
        return None if oldest is None else (oldest[0], LogPosition(*oldest[1]))

    @property
    def delivered(self) -> Delivered:
        """What was delivered so far."""
        high, snapshot = self._native.delivered
        return Delivered(high, snapshot)

    def skipped(self) -> dict[str, int]:
        """Records read and skipped so far.

        ``repeats`` (changes Debezium wrote again after a restart, dropped), ``tombstones``,
        ``heartbeats`` and ``schemaChanges``.
        """
        return dict(self._native.skipped())

    # -- planning (driver): released transactions are kept as units until delivered ---------

    def unit_sizes(self) -> list[int]:
        """Sizes of the planned units, in emitted order."""
        return self._native.unit_sizes()

    @property
    def unit_changes(self) -> int:
        """The sum of :meth:`unit_sizes`."""
        return self._native.unit_changes

    def unit(self, index: int) -> PlannedUnit:
        """Planned unit ``index`` (counted from the first not yet delivered)."""
        unit = self._native.unit(index)
        order, txn_id, size, first, scan, open_after, (high, snapshot), commit_ts_ms = unit
        return PlannedUnit(
            order,
            txn_id,
            size,
            LogPosition(*first),
            LogPosition(*scan),
            [(other, LogPosition(*position)) for other, position in open_after],
            Delivered(high, snapshot),
            commit_ts_ms,
        )

    def unit_schemas(self, index: int) -> list[tuple[int, str, str, list[str]]]:
        """Where planned unit ``index``'s tables' schemas start or change, in transaction order.

        ``(at, table, envelope schema text, DDL statements)``: from event ``at`` on, ``table``'s
        records have that schema; the statements are the schema change events read for the
        table since its previous schema (MySQL, MariaDB). Each table's first schema in this
        assembler is among them, as is every point where it differs from the table's previous
        released change's.
        """
        return self._native.unit_schemas(index)

    def schema_units(self) -> list[int]:
        """The indexes of the planned units with :meth:`unit_schemas`, in order."""
        return self._native.schema_units()

    def truncate_units(self, keep: int) -> None:
        """Forget the planned units beyond the first ``keep``; the kept units' offsets stay."""
        self._native.truncate_units(keep)

    def drop_units(self, count: int) -> None:
        """Drop the first ``count`` planned units (a batch delivered them)."""
        self._native.drop_units(count)

    def regroup(self, scan: LogPosition) -> None:
        """Release every unit so far at ``scan`` (resuming: what was re-read before it)."""
        self._native.regroup(*scan)

    # -- reading (executors) -------------------------------------------------------------------

    def emit_rows(
        self,
        start: tuple[int, int],
        end: tuple[int, int],
        source: str,
        column_types: bool,
        key_columns: Mapping[str, list[str]] | None = None,
        streams: Sequence[PlannedUnit] = (),
    ) -> None:
        """Turn released transactions into rows of ``(start, end]`` from now on (executors).

        ``start`` and ``end`` are ``(emitted, partial)`` of the range's offsets; ``source`` is
        the ``source`` column of events whose ``source.name`` is not a string; ``key_columns``
        names, per table, the columns whose values make the key of a change whose line has no
        ``key``; ``streams`` are the range's large units, whose rows are built as their events
        are read (a task then holds no more of them than a chunk's rows).
        """
        self._native.emit_rows(
            *start,
            *end,
            source,
            column_types,
            None if key_columns is None else dict(key_columns),
            [
                (
                    u.txn_id,
                    (u.first.file, u.first.byte, u.first.line),
                    u.order,
                    u.size,
                    u.commit_ts_ms,
                )
                for u in streams
            ],
        )

    def take_rows(self) -> pa.StructArray | None:
        """The rows built since the last call, or None if there are none.

        The output columns, then ``schema`` (the envelope's schema text) when built with
        ``column_types``.
        """
        rows = self._native.take_rows()
        assert rows is None or isinstance(rows, pa.StructArray)
        return rows

    def feed(
        self, chunk: LogChunk, only: set[str] | None = None, budget: int | None = None
    ) -> Feed:
        """Consume the lines of ``chunk`` (driver and executors, once per chunk).

        Parameters
        ----------
        chunk
            The next whole lines of the log.
        only
            When resuming from an offset: consume only records of these transaction ids (the
            ones the offset lists as open) and skip the rest, which were emitted before it.
        budget
            Stop after the line whose releases bring this call's released changes to at least
            this many (the rest of the chunk is left unread).

        Raises
        ------
        ChangeLogError
            The typed error (:class:`~spark_ckpt.errors.MalformedEventError`,
            :class:`~spark_ckpt.errors.DuplicateTransactionError`, ...) of the first bad line.
        """
        name, byte, line = chunk.start
        end_byte, end_line, closed_tail = self._native.feed(
            chunk.data, name, byte, line, chunk.tail_is_line, only, budget
        )
        return Feed(LogPosition(name, end_byte, end_line), closed_tail)
