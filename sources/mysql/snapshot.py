"""The initial snapshot (``snapshot=initial``): the tables read once, at one binlog position.

A :class:`SnapshotTask` (a thread of the driver) opens one ``REPEATABLE READ`` transaction with
``START TRANSACTION WITH CONSISTENT SNAPSHOT`` and learns the binlog position that transaction's
view corresponds to:

- MariaDB (and Percona Server) report it without any lock: the status variables
  ``binlog_snapshot_file`` and ``binlog_snapshot_position`` give, inside such a transaction, the
  binlog position of exactly the commits its view holds (MariaDB's "Enhancements for START
  TRANSACTION WITH CONSISTENT SNAPSHOT"); ``BINLOG_GTID_POS`` turns it into the GTID state.
- MySQL does not, so the task takes the global read lock for as long as starting the transaction
  and reading the binlog's end take (``FLUSH TABLES WITH READ LOCK``, ``START TRANSACTION WITH
  CONSISTENT SNAPSHOT``, ``SHOW BINARY LOG STATUS``, ``UNLOCK TABLES``): Debezium's MySQL
  connector's ``snapshot.locking.mode=minimal`` (``MySqlSnapshotChangeEventSource``). It needs
  the ``RELOAD`` privilege, and waits for running statements to end before the lock is granted.

Every captured table is then read in that transaction (session time zone UTC, so a
``TIMESTAMP`` reads as the binlog holds it), its values rendered as the binlog's are
(:mod:`.catalog`, :mod:`.values`), into spill files (:mod:`spark_ckpt.sources.snapshot_spill`).
The stream starts at the snapshot's position: a transaction is in the snapshot or in the stream,
never both, never neither. A manifest marks the spill complete; the snapshot is delivered as one
unit in one batch, and a re-run of that batch reads the same files.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_ckpt.errors import SourceConnectionError, TableCaptureError
from spark_ckpt.model.schema_changes import TableSchema
from spark_ckpt.testing.faults import crash_point

from ..snapshot_spill import FILE_ROWS, SpillDirectory
from ..snapshot_thread import SnapshotThread
from .binlog_offset import BinlogPosition
from .catalog import estimated_rows, table_columns
from .queried_rows import queried_rows
from .schemas import SchemaState, table_schema
from .server import connection_settings
from .types import MySqlColumn, types_json

if TYPE_CHECKING:
    from pymysql.connections import Connection

    from .options import MySqlOptions

__all__ = [
    "SnapshotManifest",
    "SnapshotSpill",
    "SnapshotTask",
    "binlog_end",
    "consistent_snapshot",
]

_log = logging.getLogger(__name__)


_CONNECTION_LOST = frozenset({2003, 2006, 2013})
"""PyMySQL's codes for a server that cannot be reached, has gone away, or dropped the query."""


@dataclass
class SnapshotManifest:
    """The state of a snapshot spill.

    Attributes
    ----------
    file, pos
        The binlog position the snapshot is consistent with: the stream starts there.
    gtid
        The server's GTID state at that position, where it has GTIDs.
    taken_at_us
        When the snapshot was taken (microseconds since the epoch); the rows' ``commit_ts``.
    schemas
        The tables' schemas as the snapshot read them (a :class:`~.schemas.SchemaState`'s JSON).
    column_types
        ``(table, column_types text)`` per captured table.
    files
        ``(file name, rows)`` in order.
    complete
        True once every table was read.
    """

    file: str
    pos: int
    gtid: str | None
    taken_at_us: int
    schemas: dict[str, Any] = field(default_factory=dict)
    column_types: list[tuple[str, str]] = field(default_factory=list)
    files: list[tuple[str, int]] = field(default_factory=list)
    complete: bool = False

    @property
    def position(self) -> BinlogPosition:
        """Where the stream starts."""
        return BinlogPosition(self.file, self.pos)

    @property
    def rows(self) -> int:
        """Rows in all files."""
        return sum(rows for _, rows in self.files)

    def schema_state(self) -> SchemaState:
        """The tables' schemas at the snapshot's position."""
        return SchemaState.from_json(self.schemas)

    def to_bytes(self) -> bytes:
        """JSON."""
        return json.dumps(self.__dict__, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> SnapshotManifest:
        """Parse :meth:`to_bytes`."""
        body = json.loads(raw)
        body["files"] = [(str(name), int(rows)) for name, rows in body["files"]]
        body["column_types"] = [(str(t), str(types)) for t, types in body["column_types"]]
        return cls(**body)


class SnapshotSpill(SpillDirectory):
    """The mysql connector's spill: the snapshot's files with its :class:`SnapshotManifest`."""

    def manifest(self) -> SnapshotManifest | None:
        """The manifest, or None (driver)."""
        data = self.manifest_bytes()
        return None if data is None else SnapshotManifest.from_bytes(data)

    def write_manifest(self, manifest: SnapshotManifest) -> None:
        """Durably replace the manifest (driver)."""
        self.write_manifest_bytes(manifest.to_bytes())


def consistent_snapshot(
    conn: Connection[Any], lock_free: bool | None = None
) -> tuple[BinlogPosition, str | None]:
    """Start the snapshot's transaction on ``conn``; the binlog position its view matches.

    ``lock_free``: None asks the server whether it reports the position of a consistent
    snapshot (MariaDB, Percona Server); False takes the global read lock meanwhile (MySQL).
    Driver, once per snapshot.
    """
    with conn.cursor() as cursor:
        cursor.execute("SET SESSION time_zone = '+00:00'")
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if lock_free is None:
            cursor.execute("SHOW SESSION STATUS LIKE 'binlog_snapshot_file'")
            lock_free = cursor.fetchone() is not None
        if lock_free:
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            cursor.execute("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
            status = {str(k).lower(): str(v) for k, v in cursor.fetchall()}
            position = BinlogPosition(
                status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
            )
        else:
            cursor.execute("FLUSH TABLES WITH READ LOCK")
            try:
                cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
                position = binlog_end(cursor)
            finally:
                cursor.execute("UNLOCK TABLES")
        return position, _gtid_at(cursor, position)


def binlog_end(cursor: Any) -> BinlogPosition:
    """The binlog's end now (``SHOW BINARY LOG STATUS``; driver or executor)."""
    import pymysql

    # MySQL 8.4 renamed SHOW MASTER STATUS; MariaDB and MySQL 8.0 know the old name.
    for statement in ("SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"):
        try:
            cursor.execute(statement)
        except pymysql.MySQLError:
            continue
        row = cursor.fetchone()
        if row is not None:
            return BinlogPosition(str(row[0]), int(row[1]))
    raise SourceConnectionError("the server reports no binlog position for the snapshot")


def _gtid_at(cursor: Any, position: BinlogPosition) -> str | None:
    """MariaDB's GTID state at ``position`` (``BINLOG_GTID_POS``); None on other servers."""
    import pymysql

    try:
        cursor.execute("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos))
    except pymysql.MySQLError:  # MySQL has no such function
        return None
    row = cursor.fetchone()
    return str(row[0]) if row and row[0] else None


class SnapshotTask(SnapshotThread[SnapshotManifest]):
    """Takes the snapshot in the background (driver, once per snapshot attempt).

    Parameters
    ----------
    options
        The connector's options (the server, the tables).
    keys
        Each captured table's primary key columns.
    spill
        Where the rows go.
    lock_free
        See :func:`consistent_snapshot` (None: the server's own answer).
    """

    def __init__(
        self,
        options: MySqlOptions,
        keys: dict[str, tuple[str, ...]],
        spill: SnapshotSpill,
        lock_free: bool | None = None,
    ) -> None:
        super().__init__("txn-cdc-mysql-snapshot", len(options.tables), _log)
        self.options = options
        self.keys = keys
        self.spill = spill
        self.lock_free = lock_free

    def take(self) -> SnapshotManifest:
        """Read every table at one binlog position into the spill (the task's thread)."""
        import pymysql

        self.spill.clear()
        self.spill.directory.make_dirs()
        try:
            conn = pymysql.connect(autocommit=True, **connection_settings(self.options))
        except pymysql.MySQLError as e:
            raise SourceConnectionError(
                f"the snapshot cannot connect to {self.options.host}:{self.options.port} as user "
                f"{self.options.user!r}: {e.args[-1] if e.args else type(e).__name__}"
            ) from None
        try:
            position, gtid = consistent_snapshot(conn, self.lock_free)
            manifest = SnapshotManifest(
                position.file, position.pos, gtid, int(time.time() * 1_000_000)
            )
            self.rows_estimated = estimated_rows(conn, self.options.tables)
            schemas: dict[str, TableSchema] = {}
            for index, name in enumerate(self.options.tables):
                self.current_table = name
                columns = table_columns(conn, name)
                schemas[name] = table_schema(columns, None)
                manifest.column_types.append((name, types_json(columns)))
                self._spill_table(conn, name, columns, manifest)
                self.tables_done = index + 1
                crash_point("during_snapshot", index)
            conn.rollback()
        except pymysql.MySQLError as e:
            reason = e.args[-1] if e.args else type(e).__name__
            if e.args and e.args[0] in _CONNECTION_LOST:
                raise SourceConnectionError(
                    f"the connection to {self.options.host}:{self.options.port} was lost while "
                    f"the snapshot read {self.current_table or 'the tables'}: {reason} (the "
                    f"query's restart takes the snapshot again)"
                ) from None
            raise TableCaptureError(
                f"the snapshot of {self.current_table or 'the tables'} failed: {reason} (a "
                f"table altered while the snapshot read it fails it: the query's restart takes "
                f"the snapshot again)"
            ) from None
        finally:
            conn.close()
        self.current_table = None
        manifest.schemas = SchemaState(schemas).to_json()
        manifest.complete = True
        self.spill.write_manifest(manifest)
        _log.info("mysql snapshot at %s: %s", position, self.progress().summary)
        return manifest

    def _spill_table(
        self,
        conn: Connection[Any],
        name: str,
        columns: tuple[MySqlColumn, ...],
        manifest: SnapshotManifest,
    ) -> None:
        import pymysql.cursors

        database, table = name.split(".")
        listed = ", ".join(f"`{c.name.replace('`', '``')}`" for c in columns)
        key = self.keys[name]
        # Unbuffered: the rows stream from the server, a file's worth at a time, rendered
        # natively as they arrive.
        with conn.cursor(pymysql.cursors.SSCursor) as cursor:
            cursor.execute(f"SELECT {listed} FROM `{database}`.`{table}`")
            where = f"{self.options.host}:{self.options.port}"
            for keys, afters in queried_rows(cursor, columns, key, FILE_ROWS, where):
                file_name = self.spill.write_file(name, keys, afters, len(manifest.files))
                manifest.files.append((file_name, len(keys)))
                self.rows_read += len(keys)
                self.log_progress("mysql snapshot")
