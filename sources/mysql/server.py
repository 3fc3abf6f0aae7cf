"""The MySQL or MariaDB server: connecting, its binlog settings and grants, its binlog position.

Checked once at a query's start (:func:`check_server`), so a server that cannot be read as the
connector needs fails then with a typed error naming the setting or the grant, not later in a
decode. Runs on the driver; every function opens and closes its own short connection (PyMySQL,
which the binlog client uses too).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_ckpt.errors import (
    SourceConnectionError,
    SourcePrivilegeError,
    SourceSettingError,
    TableCaptureError,
)

from .binlog_offset import BinlogPosition

if TYPE_CHECKING:
    from pymysql.connections import Connection

    from .options import MySqlOptions

__all__ = [
    "ServerInfo",
    "added_column_default",
    "binlog_files",
    "check_server",
    "connect",
    "connection_settings",
    "current_position",
    "identity",
    "next_bytes",
    "primary_keys",
]

# What change capture needs of the binlog (MySQL's and MariaDB's replication documentation): rows,
# whole images, and the table map's full metadata (column names, signedness, primary key), which
# makes every row event decodable as it was written, whatever DDL came after it.
_NEEDED = {
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
}
_WHAT_IS_LOST = {
    "binlog_format": "statements are logged instead of rows, so changes cannot be read",
    "binlog_row_image": "updates and deletes log only some columns, so images are incomplete",
    "binlog_row_metadata": "row events carry no column names, so a row written before a later "
    "ALTER TABLE would be decoded with the new columns",
}


@dataclass(frozen=True)
class ServerInfo:
    """What the connector needs to know about the server."""

    version: str
    mariadb: bool
    identity: str = ""
    """Which server this is, as offsets record it: ``mariadb:<server_id>`` (a replica of the
    same history has its own server id) or ``mysql:<server_uuid>``."""


def connection_settings(options: MySqlOptions) -> dict[str, Any]:
    """PyMySQL's keyword arguments for the options' server (holds the password: never log it)."""
    settings: dict[str, Any] = {
        "host": options.host,
        "port": options.port,
        "user": options.user,
        "charset": "utf8mb4",
        "connect_timeout": 10,
    }
    if options.password:
        settings["password"] = options.password
    return settings


@contextlib.contextmanager
def connect(options: MySqlOptions) -> Iterator[Connection[Any]]:
    """A short autocommit connection to the server (driver).

    Raises
    ------
    SourceConnectionError
        When the server cannot be reached or refuses the user; the message names the endpoint
        and the user, never the password.
    """
    import pymysql

    try:
        conn = pymysql.connect(autocommit=True, **connection_settings(options))
    except pymysql.MySQLError as e:
        reason = _without_password(str(e.args[-1] if e.args else e), options.password)
        raise SourceConnectionError(
            f"cannot connect to MySQL/MariaDB at {options.host}:{options.port} as user "
            f"{options.user!r}: {reason}"
        ) from None
    try:
        yield conn
    finally:
        conn.close()


def _without_password(text: str, password: str | None) -> str:
    return text.replace(password, "***") if password else text


def _one(conn: Connection[Any], sql: str) -> tuple[Any, ...] | None:
    with conn.cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
    return None if row is None else tuple(row)


def check_server(options: MySqlOptions) -> tuple[ServerInfo, dict[str, tuple[str, ...]]]:
    """Check the binlog's settings, the user's grants and the tables (driver, once per start).

    Returns the server's version and flavour, and each table's primary key columns.

    Raises
    ------
    SourceSettingError
        When the binlog is off or a setting of :data:`_NEEDED` differs (the message says what a
        weaker setting would lose and how to set it).
    SourcePrivilegeError
        When the user lacks ``REPLICATION SLAVE``, ``REPLICATION CLIENT`` or ``SELECT``.
    TableCaptureError
        When a table is missing or has no primary key.
    """
    with connect(options) as conn:
        version = str((_one(conn, "SELECT VERSION()") or ("",))[0])
        mariadb = "mariadb" in version.lower()
        info = ServerInfo(version, mariadb, identity(conn, mariadb))
        _check_settings(conn)
        _check_grants(conn, options.user, info)
        keys = primary_keys(conn, options.tables)
    return info, keys


def identity(conn: Connection[Any], mariadb: bool) -> str:
    """The server's identity (see :attr:`ServerInfo.identity`; driver, once per start)."""
    if mariadb:
        return f"mariadb:{(_one(conn, 'SELECT @@GLOBAL.server_id') or ('',))[0]}"
    return f"mysql:{(_one(conn, 'SELECT @@GLOBAL.server_uuid') or ('',))[0]}"


def _check_settings(conn: Connection[Any]) -> None:
    import pymysql

    log_bin = _one(conn, "SELECT @@GLOBAL.log_bin")
    if log_bin is None or str(log_bin[0]) not in ("1", "ON"):
        raise SourceSettingError(
            "the server writes no binary log (log_bin is off), so there are no changes to read: "
            "start it with log_bin (and binlog_format=ROW, binlog_row_image=FULL, "
            "binlog_row_metadata=FULL)"
        )
    for name, needed in _NEEDED.items():
        try:
            found = _one(conn, f"SELECT @@GLOBAL.{name}")
        except pymysql.MySQLError:  # an unknown variable: a server too old for it
            found = None
        value = None if found is None else str(found[0]).upper()
        if value != needed:
            raise SourceSettingError(
                f"the server has {name}={value or 'unsupported'}, but change capture needs "
                f"{name}={needed} ({_WHAT_IS_LOST[name]}): set it with SET PERSIST {name} = "
                f"'{needed}' (MariaDB: SET GLOBAL, and in the option file) and restart the query; "
                f"{name} needs MySQL 8.0.14+ or MariaDB 10.5+"
            )
    _check_partial_json(conn)


def _check_partial_json(conn: Connection[Any]) -> None:
    """MySQL 8's ``binlog_row_value_options=PARTIAL_JSON`` logs a JSON update as a diff."""
    import pymysql

    try:
        found = _one(conn, "SELECT @@GLOBAL.binlog_row_value_options")
    except pymysql.MySQLError:  # MariaDB has no such variable: its JSON is text
        return
    if found is not None and "PARTIAL_JSON" in str(found[0]).upper():
        raise SourceSettingError(
            "the server has binlog_row_value_options=PARTIAL_JSON, so an update of a JSON column "
            "logs only what changed in the document and the row's new image is incomplete: "
            "SET PERSIST binlog_row_value_options = '' and restart the query"
        )


_GRANT_ON_ALL = re.compile(r"^GRANT (?P<privileges>.+?) ON \*\.\* TO ", re.IGNORECASE)


def _check_grants(conn: Connection[Any], user: str, info: ServerInfo) -> None:
    with conn.cursor() as cursor:
        cursor.execute("SHOW GRANTS FOR CURRENT_USER()")
        grants = [str(row[0]) for row in cursor.fetchall()]
    held: set[str] = set()
    for grant in grants:
        found = _GRANT_ON_ALL.match(grant)
        if found:
            held |= {p.strip().upper() for p in found["privileges"].split(",")}
    if "ALL PRIVILEGES" in held:
        return
    # MariaDB 10.5+ shows REPLICATION CLIENT as BINLOG MONITOR (its new name).
    client = {"REPLICATION CLIENT", "BINLOG MONITOR"}
    for needed, accepted, purpose in (
        ("REPLICATION SLAVE", {"REPLICATION SLAVE", "REPLICATION REPLICA"}, "read the binlog"),
        ("REPLICATION CLIENT", client, "read the binlog's position (SHOW MASTER STATUS)"),
    ):
        if not held & accepted:
            alias = info.mariadb and needed == "REPLICATION CLIENT"
            also = "; MariaDB 10.5+ calls it BINLOG MONITOR" if alias else ""
            raise SourcePrivilegeError(
                f"user {user!r} lacks {needed}, needed to {purpose}: GRANT {needed} ON *.* TO "
                f"the user (the connector needs REPLICATION SLAVE, REPLICATION CLIENT and SELECT "
                f"on the captured tables{also})"
            )


def primary_keys(conn: Connection[Any], tables: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Each table's primary key columns, in key order (driver, once per start).

    Raises
    ------
    SourcePrivilegeError
        When the user may not read a table.
    TableCaptureError
        When a table is missing or has no primary key.
    """
    import pymysql

    keys: dict[str, tuple[str, ...]] = {}
    with conn.cursor() as cursor:
        for name in tables:
            database, table = name.split(".")
            try:
                cursor.execute(f"SELECT 1 FROM `{database}`.`{table}` LIMIT 0")
            except pymysql.MySQLError as e:
                code = e.args[0] if e.args else None
                if code in (1142, 1044):  # table access denied, database access denied
                    raise SourcePrivilegeError(
                        f"user lacks SELECT on {name}, needed to capture it: GRANT SELECT ON "
                        f"`{database}`.`{table}` TO the user"
                    ) from None
                raise TableCaptureError(f"table {name} cannot be captured: {e.args[-1]}") from None
            cursor.execute(
                "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE "
                "TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' "
                "ORDER BY ORDINAL_POSITION",
                (database, table),
            )
            columns = tuple(str(row[0]) for row in cursor.fetchall())
            if not columns:
                raise TableCaptureError(
                    f"table {name} has no primary key: the mysql connector keys every change by "
                    f"it (ALTER TABLE {name} ADD PRIMARY KEY (...))"
                )
            keys[name] = columns
    return keys


def current_position(options: MySqlOptions, info: ServerInfo) -> tuple[BinlogPosition, str | None]:
    """The binlog's end now, and the server's GTID state there where it has GTIDs (driver)."""
    import pymysql

    with connect(options) as conn:
        # MySQL 8.4 renamed SHOW MASTER STATUS; MariaDB and MySQL 8.0 know the old name.
        status = None
        for statement in ("SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"):
            try:
                status = _one(conn, statement)
                break
            except pymysql.MySQLError:  # the other spelling
                continue
        if status is None:
            raise SourceSettingError("the server reports no binlog position (is log_bin on?)")
        position = BinlogPosition(str(status[0]), int(status[1]))
        if info.mariadb:
            gtid = _one(conn, "SELECT @@GLOBAL.gtid_binlog_pos")
            return position, (str(gtid[0]) or None) if gtid else None
        executed = str(status[4]) if len(status) > 4 and status[4] else None
        return position, executed


def binlog_files(options: MySqlOptions) -> list[str]:
    """The binlog files the server still has, oldest first (driver)."""
    with connect(options) as conn, conn.cursor() as cursor:
        cursor.execute("SHOW BINARY LOGS")
        return [str(row[0]) for row in cursor.fetchall()]


_LITERAL = re.compile(r"^(?:[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|'(?:[^'\\]|\\.|'')*')$")
"""A number or a quoted string: a default MariaDB's catalog spells as a literal."""


def added_column_default(
    options: MySqlOptions, info: ServerInfo, table: str, column: str
) -> tuple[bool, Any]:
    """What the existing rows of ``table`` read for ``column``, just added: ``(known, value)``.

    MySQL fills existing rows with the column's default when a column is added: NULL for a
    nullable column without one; a literal default's value (MariaDB's catalog spells defaults as
    SQL expressions, so a literal is evaluated by the server, never a function). Not known: a
    default that is an expression (``current_timestamp()``: evaluated at the ALTER, not now), a
    ``NOT NULL`` column without a default (MySQL's implicit 0 or ''), MySQL's literal spellings
    (untested here), and a column the catalog no longer has. Driver, once per added column.
    """
    database, name = table.split(".")
    with connect(options) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT IS_NULLABLE, COLUMN_DEFAULT FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND COLUMN_NAME = %s",
            (database, name, column),
        )
        row = cursor.fetchone()
        if row is None:
            return False, None
        nullable, default = str(row[0]).upper() == "YES", row[1]
        if default is None or (info.mariadb and str(default).upper() == "NULL"):
            return nullable, None
        if not info.mariadb or not _LITERAL.match(str(default)):
            return False, None
        cursor.execute(f"SELECT {default}")
        found = cursor.fetchone()
        return True, None if found is None else found[0]


_READ_SIZE = 1 << 18
"""Bytes asked of a connection per read: whatever of it has arrived comes back at once."""


def next_bytes(connection: Any, where: str, reading: str) -> bytes:
    """The next bytes the server sent on PyMySQL's ``connection``, read past PyMySQL.

    For the streams the native module parses itself (the binlog, a snapshot's rows). Blocks
    until some arrive; ``where`` names the server and ``reading`` what was read, in errors.

    Raises
    ------
    SourceConnectionError
        When the read fails or the server closed the connection.
    """
    try:
        data = connection._rfile.read1(_READ_SIZE)
    except OSError as e:
        raise SourceConnectionError(f"reading {reading} from {where} failed: {e}") from None
    if not data:
        raise SourceConnectionError(f"{where} closed the connection while sending {reading}")
    return bytes(data)
