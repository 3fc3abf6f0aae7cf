"""A PostgreSQL logical replication slot read through SQL (driver, reader process).

Changes are *peeked* (``pg_logical_slot_peek_changes``), never consumed, so a batch can be read
again after a failure; the slot is confirmed (``pg_replication_slot_advance``) only up to offsets
Spark has committed. A slot created with an exported snapshot (over a ``replication=database``
connection, where PostgreSQL accepts ``CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')``) gives
the snapshot phase a view of the tables exactly at the slot's consistent point.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import psycopg

from spark_ckpt.errors import ReplicationSlotError, SlotInvalidatedError

from .connect import connect, quote_identifier, scrub
from .decoding.by_name import output_plugin
from .lsn import format_lsn, parse_lsn
from .plugins import PLUGIN, PLUGINS

__all__ = [
    "HEARTBEAT_PREFIX",
    "SLOT_HEALTH_KEYS",
    "ExportedSnapshot",
    "Slot",
    "SlotHealth",
    "SlotInfo",
]

_FETCH_ROWS = 2_000  # rows per round trip while streaming a peek

HEARTBEAT_PREFIX = "spark-ckpt-heartbeat"
"""The prefix of the logical decoding messages a heartbeat writes (content: the slot's name)."""


@dataclass(frozen=True)
class SlotInfo:
    """What ``pg_replication_slots`` says about a slot."""

    name: str
    plugin: str
    database: str
    confirmed_flush: int
    active: bool
    wal_status: str | None = None
    """``reserved``, ``extended``, ``unreserved`` or ``lost`` (invalidated: its WAL is gone)."""


SLOT_HEALTH_KEYS = ("lagBytes", "retainedBytes", "walStatus", "safeWalSize")
"""The keys of :meth:`SlotHealth.to_json`."""


@dataclass(frozen=True)
class SlotHealth:
    """How far a slot is behind the server, from ``pg_replication_slots`` (driver, per trigger).

    Attributes
    ----------
    lag_bytes
        WAL written since the slot's confirmed position (``pg_current_wal_lsn() -
        confirmed_flush_lsn``): what the query has not confirmed yet.
    retained_bytes
        WAL the server keeps for the slot (from its ``restart_lsn``): the disk it pins.
    wal_status
        ``reserved`` / ``extended`` / ``unreserved`` / ``lost``.
    safe_wal_size
        Bytes that can still be written before the slot is in danger of invalidation (None
        when ``max_slot_wal_keep_size`` is unlimited).
    """

    lag_bytes: int
    retained_bytes: int | None
    wal_status: str | None
    safe_wal_size: int | None

    def to_json(self) -> dict[str, Any]:
        """camelCase, as in Spark's progress events."""
        values = (self.lag_bytes, self.retained_bytes, self.wal_status, self.safe_wal_size)
        return dict(zip(SLOT_HEALTH_KEYS, values, strict=True))


@dataclass
class ExportedSnapshot:
    """A slot just created with an exported snapshot, alive while ``holder`` is open."""

    consistent_point: int
    snapshot_name: str
    holder: psycopg.Connection[Any]

    def release(self) -> None:
        """Close the replication connection (after the snapshot was imported)."""
        self.holder.close()


class Slot:
    """One slot on one database.

    Parameters
    ----------
    dsn
        Connection string (may hold a password; never printed).
    name
        The slot's name.
    plugin
        Its output plugin, one of :data:`PLUGINS`.
    publication
        pgoutput only: the publication it streams.
    """

    def __init__(
        self, dsn: str, name: str, plugin: str = PLUGIN, publication: str | None = None
    ) -> None:
        self.dsn = dsn
        self.name = name
        self.plugin = plugin
        self.publication = publication
        self._conn: psycopg.Connection[Any] | None = None

    def connection(self) -> psycopg.Connection[Any]:
        """The slot's SQL connection, opened on first use and again after it broke."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = connect(self.dsn)
        return self._conn

    def close(self) -> None:
        """Close the SQL connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def info(self) -> SlotInfo | None:
        """The slot's state, or None when it does not exist."""
        row = (
            self.connection()
            .execute(
                "SELECT plugin, database, confirmed_flush_lsn::text, active, wal_status "
                "FROM pg_replication_slots WHERE slot_name = %s AND slot_type = 'logical'",
                (self.name,),
            )
            .fetchone()
        )
        if row is None:
            return None
        plugin, database, confirmed, active, wal_status = row
        # An invalidated slot has lost its position along with its WAL: -1 marks "none".
        position = -1 if confirmed is None else parse_lsn(confirmed)
        return SlotInfo(self.name, str(plugin), str(database), position, bool(active), wal_status)

    def health(self) -> SlotHealth | None:
        """How far behind the slot is (None when it does not exist); one query.

        Raises
        ------
        SlotInvalidatedError
            When the server has invalidated the slot.
        """
        row = (
            self.connection()
            .execute(
                "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, "
                "(pg_current_wal_lsn() - restart_lsn)::bigint, wal_status, safe_wal_size "
                "FROM pg_replication_slots WHERE slot_name = %s",
                (self.name,),
            )
            .fetchone()
        )
        if row is None:
            return None
        lag, retained, wal_status, safe = row
        if wal_status == "lost":
            raise self.invalidated()
        return SlotHealth(int(lag or 0), retained, wal_status, safe)

    def invalidated(self) -> SlotInvalidatedError:
        """The error for this slot being invalidated by the server."""
        return SlotInvalidatedError(
            f"replication slot {self.name!r} was invalidated by the server (wal_status=lost): it "
            f"fell more than max_slot_wal_keep_size behind, and the WAL it still needed was "
            f"removed, so the changes after its position are gone. Nothing after the gap is "
            f"published. To recover, drop the slot (SELECT pg_drop_replication_slot("
            f"'{self.name}')) and start over with a new checkpointLocation and "
            f"snapshot=initial; raise max_slot_wal_keep_size (or keep the query running) so it "
            f"does not happen again"
        )

    def check(self, info: SlotInfo) -> None:
        """Refuse a slot this connector cannot read (invalidated, another plugin or database)."""
        if info.wal_status == "lost":
            raise self.invalidated()
        database = self.connection().execute("SELECT current_database()").fetchone()
        if info.plugin != self.plugin:
            raise ReplicationSlotError(
                f"replication slot {self.name!r} uses the output plugin {info.plugin!r}, but the "
                f"option 'plugin' is {self.plugin!r}. Set plugin={info.plugin} if it is one of "
                f"{', '.join(PLUGINS)}, choose another option 'slot' (it is created when "
                f"missing), or drop this one"
            )
        if database is not None and info.database != database[0]:
            raise ReplicationSlotError(
                f"replication slot {self.name!r} belongs to database {info.database!r}, but the "
                f"option 'dsn' connects to {database[0]!r}"
            )

    def create(self) -> SlotInfo:
        """Create the slot now (no snapshot); return its state."""
        try:
            self.connection().execute(
                "SELECT pg_create_logical_replication_slot(%s, %s)", (self.name, self.plugin)
            )
        except psycopg.Error as e:
            raise self._error("cannot create", e) from None
        info = self.info()
        assert info is not None
        return info

    def create_with_snapshot(self) -> ExportedSnapshot:
        """Create the slot and export a snapshot of the database at its consistent point."""
        holder = connect(self.dsn, autocommit=True, replication="database")
        slot = quote_identifier(self.name)
        command = f"CREATE_REPLICATION_SLOT {slot} LOGICAL {self.plugin} (SNAPSHOT 'export')"
        # Replication connections take the simple query protocol only: libpq's PQexec.
        result = holder.pgconn.exec_(command.encode())
        if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
            message = scrub(result.error_message.decode(errors="replace").strip(), self.dsn)
            holder.close()
            raise ReplicationSlotError(
                f"cannot create replication slot {self.name!r} with an exported snapshot: "
                f"{message}. The snapshot phase (snapshot=initial) needs a user with the "
                f"REPLICATION attribute and max_wal_senders > 0"
            )
        point = result.get_value(0, 1)
        name = result.get_value(0, 2)
        assert point is not None
        assert name is not None
        return ExportedSnapshot(parse_lsn(point.decode()), name.decode(), holder)

    def drop(self) -> None:
        """Drop the slot if it exists."""
        try:
            self.connection().execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (self.name,),
            )
        except psycopg.Error as e:
            raise self._error("cannot drop", e) from None

    def advance(self, lsn: int) -> None:
        """Confirm everything before ``lsn`` (never moves the slot back)."""
        info = self.info()
        if info is None or info.confirmed_flush >= lsn:
            return
        try:
            self.connection().execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.name, format_lsn(lsn))
            )
        except psycopg.Error as e:
            raise self._error("cannot advance", e) from None

    def emit_heartbeat(self) -> int:
        """Write a logical decoding message into the WAL now; return its LSN.

        Non-transactional, so it is decoded at its position even when nothing else of this
        database is: the next peek sees it and the slot can be confirmed up to it.
        """
        row = (
            self.connection()
            .execute(
                "SELECT pg_logical_emit_message(false, %s, %s)::text", (HEARTBEAT_PREFIX, self.name)
            )
            .fetchone()
        )
        assert row is not None
        return parse_lsn(row[0])

    def peek(
        self, upto_lsn: int | None, upto_changes: int | None, tables: Sequence[str]
    ) -> list[tuple[str, int | None, Any]]:
        """:meth:`stream` into a list."""
        return list(self.stream(upto_lsn, upto_changes, tables))

    def stream(
        self, upto_lsn: int | None, upto_changes: int | None, tables: Sequence[str]
    ) -> Iterator[tuple[str, int | None, Any]]:
        """Decode without consuming: ``(lsn, xid, data)`` rows from the confirmed position on.

        Rows arrive in batches of :data:`_FETCH_ROWS` as the server sends them, so memory does
        not grow with the peek's size; the connection is busy until the iterator is exhausted.
        ``data`` is wal2json's text, or a pgoutput message (bytes).

        ``upto_lsn`` keeps only transactions that commit before it; ``upto_changes`` stops after
        the transaction holding that many rows. Either may be None (no bound).
        """
        plugin = output_plugin(self.plugin)
        options = plugin.peek_options(tables, self.publication)
        function = plugin.peek_function
        placeholders = ", ".join(["%s"] * len(options))
        query = (
            f"SELECT lsn::text, xid::text::bigint, data FROM {function}("
            f"%s, %s::pg_lsn, %s, {placeholders})"
        )
        upto = None if upto_lsn is None else format_lsn(upto_lsn)
        params = (self.name, upto, upto_changes, *options)
        try:
            # Binary results: pgoutput's bytea arrives as bytes without hex decoding. The
            # columns are text, bigint, text (bytea): psycopg hands out tuples as they are.
            cursor = self.connection().cursor()
            rows = cursor.stream(query, params, binary=plugin.binary, size=_FETCH_ROWS)
            yield from cast(Iterator[tuple[str, int | None, Any]], rows)
        except psycopg.Error as e:
            raise self._error("cannot read changes from", e) from None

    def _error(self, action: str, error: psycopg.Error) -> ReplicationSlotError:
        detail = scrub(str(error).strip(), self.dsn)
        if "invalidated" in detail:
            return self.invalidated()
        hint = ""
        if "does not exist" in detail:
            hint = (
                ". The slot was dropped: the changes it retained are gone. Start over with a new "
                "checkpointLocation (and snapshot=initial to read the tables again)"
            )
        elif "is active" in detail:
            hint = ". Another consumer is using it: give each query a slot of its own"
        return ReplicationSlotError(f"{action} replication slot {self.name!r}: {detail}{hint}")
