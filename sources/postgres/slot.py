"""A PostgreSQL logical replication slot read through SQL (driver, reader process).

Changes are *peeked* (``pg_logical_slot_peek_changes``), never consumed, so a batch can be read
again after a failure; the slot is confirmed (``pg_replication_slot_advance``) only up to offsets
Spark has committed. A slot created with an exported snapshot (over a ``replication=database``
connection, where PostgreSQL accepts ``CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export')``) gives
the snapshot phase a view of the tables exactly at the slot's consistent point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import psycopg

from spark_ckpt.errors import ReplicationSlotError

from .connect import connect, scrub
from .lsn import format_lsn, parse_lsn
from .wal2json import PLUGIN_OPTIONS

__all__ = ["PLUGIN", "ExportedSnapshot", "Slot", "SlotInfo"]

PLUGIN = "wal2json"
"""The output plugin slots are created with (``postgresql-15-wal2json`` on Debian)."""


@dataclass(frozen=True)
class SlotInfo:
    """What ``pg_replication_slots`` says about a slot."""

    name: str
    plugin: str
    database: str
    confirmed_flush: int
    active: bool


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
    """

    def __init__(self, dsn: str, name: str) -> None:
        self.dsn = dsn
        self.name = name
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
                "SELECT plugin, database, confirmed_flush_lsn::text, active "
                "FROM pg_replication_slots WHERE slot_name = %s AND slot_type = 'logical'",
                (self.name,),
            )
            .fetchone()
        )
        if row is None:
            return None
        plugin, database, confirmed, active = row
        return SlotInfo(self.name, str(plugin), str(database), parse_lsn(confirmed), bool(active))

    def check(self, info: SlotInfo) -> None:
        """Refuse a slot this connector cannot read (another plugin or database)."""
        database = self.connection().execute("SELECT current_database()").fetchone()
        if info.plugin != PLUGIN:
            raise ReplicationSlotError(
                f"replication slot {self.name!r} uses the output plugin {info.plugin!r}; the "
                f"postgres connector reads {PLUGIN!r} slots. Choose another option 'slot' (it is "
                f"created when missing) or drop this one"
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
                "SELECT pg_create_logical_replication_slot(%s, %s)", (self.name, PLUGIN)
            )
        except psycopg.Error as e:
            raise self._error("cannot create", e) from None
        info = self.info()
        assert info is not None
        return info

    def create_with_snapshot(self) -> ExportedSnapshot:
        """Create the slot and export a snapshot of the database at its consistent point."""
        holder = connect(self.dsn, autocommit=True, replication="database")
        command = f"CREATE_REPLICATION_SLOT {_identifier(self.name)} LOGICAL {PLUGIN} " + (
            "(SNAPSHOT 'export')"
        )
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

    def peek(
        self, upto_lsn: int | None, upto_changes: int | None, tables: Sequence[str]
    ) -> list[tuple[str, int | None, str]]:
        """Decode without consuming: ``(lsn, xid, data)`` rows from the confirmed position on.

        ``upto_lsn`` keeps only transactions that commit before it; ``upto_changes`` stops after
        the transaction holding that many rows. Either may be None (no bound).
        """
        options = [*PLUGIN_OPTIONS, "add-tables", ",".join(_wal2json_table(t) for t in tables)]
        placeholders = ", ".join(["%s"] * len(options))
        query = (
            f"SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_changes("
            f"%s, %s::pg_lsn, %s, {placeholders})"
        )
        upto = None if upto_lsn is None else format_lsn(upto_lsn)
        try:
            cursor = self.connection().execute(query, (self.name, upto, upto_changes, *options))
            # The columns are text, bigint, text: psycopg hands out (str, int, str) tuples as is.
            return cast(list[tuple[str, int | None, str]], cursor.fetchall())
        except psycopg.Error as e:
            raise self._error("cannot read changes from", e) from None

    def _error(self, action: str, error: psycopg.Error) -> ReplicationSlotError:
        detail = scrub(str(error).strip(), self.dsn)
        hint = ""
        if "does not exist" in detail:
            hint = (
                ". The slot was dropped: the changes it retained are gone. Start over with a new "
                "checkpointLocation (and snapshot=initial to read the tables again)"
            )
        elif "is active" in detail:
            hint = ". Another consumer is using it: give each query a slot of its own"
        return ReplicationSlotError(f"{action} replication slot {self.name!r}: {detail}{hint}")


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _wal2json_table(name: str) -> str:
    # wal2json's add-tables: "schema.table", with "," "." "*" and "\\" escaped by a backslash.
    schema, _, table = name.partition(".")

    def escape(part: str) -> str:
        return "".join("\\" + c if c in ",.*\\ " else c for c in part)

    return f"{escape(schema)}.{escape(table)}"
