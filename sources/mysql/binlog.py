"""Reading the binlog over the replication protocol: the client's events as transactions.

``mysql-replication`` (PyPI; built on PyMySQL) registers as a replica with the options' server
id, asks for the binlog from a file and position (``COM_BINLOG_DUMP``, non-blocking: the server
sends what it has, then end-of-file) and decodes the row events with the table map's full
metadata (``binlog_row_metadata=FULL``), so each row is decoded with the columns it was written
with. Both servers are read by file and position; the GTID each transaction carries is kept for
the offset. Runs on the driver, once per trigger (a connection per read).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from spark_ckpt.errors import SourceConnectionError

from .binlog_offset import BinlogPosition
from .transactions import (
    Begin,
    BinlogTransaction,
    Commit,
    RowChange,
    Rows,
    Statement,
    TransactionAssembler,
)
from .values import row_values

if TYPE_CHECKING:
    from .options import MySqlOptions

__all__ = ["read_transactions"]

_MARIADB_STANDALONE = 0x01
"""MariaDB's GTID event flag ``FL_STANDALONE``: the event group is one statement (DDL), with no
``XID`` or ``COMMIT`` after it (MariaDB's ``log_event.h``)."""


def read_transactions(
    options: MySqlOptions,
    settings: dict[str, Any],
    start: BinlogPosition,
    assembler: TransactionAssembler,
    stop: BinlogPosition | None = None,
) -> Iterator[BinlogTransaction | Statement]:
    """Committed transactions of captured tables, and standalone statements, after ``start``.

    Reads until the binlog's current end, or until the event ending at ``stop``. Statements are
    yielded so the caller can tell whether one changes a captured table; the assembler keeps
    what a transaction still open at the end read (:attr:`~.TransactionAssembler.held_changes`).

    Raises
    ------
    SourceConnectionError
        When the server cannot be read (the message names the endpoint, never the password).
    """
    import pymysql
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    captured = frozenset(options.tables)
    stream = BinLogStreamReader(
        connection_settings=dict(settings),
        server_id=options.server_id,
        resume_stream=True,
        blocking=False,
        log_file=start.file,
        log_pos=start.pos,
        only_events=[
            GtidEvent,
            MariadbGtidEvent,
            QueryEvent,
            XidEvent,
            WriteRowsEvent,
            UpdateRowsEvent,
            DeleteRowsEvent,
        ],
        only_schemas=sorted({name.split(".")[0] for name in captured}),
        enable_logging=False,
    )
    try:
        while True:
            try:
                event = stream.fetchone()
            except pymysql.MySQLError as e:
                raise SourceConnectionError(
                    f"reading the binlog of {options.host}:{options.port} from {start} failed: "
                    f"{e.args[-1] if e.args else e}"
                ) from None
            if event is None:
                return
            end = BinlogPosition(stream.log_file, stream.log_pos)
            found = _feed(assembler, event, end, captured)
            if found is not None:
                yield found
            if stop is not None and end >= stop:
                return
    finally:
        stream.close()


def _feed(
    assembler: TransactionAssembler, event: Any, end: BinlogPosition, captured: frozenset[str]
) -> BinlogTransaction | Statement | None:
    """One client event into the assembler; what it completed, if anything."""
    from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

    if isinstance(event, MariadbGtidEvent):
        if not event.flags & _MARIADB_STANDALONE:
            assembler.begin(Begin(event.gtid))
        return None
    if isinstance(event, GtidEvent):
        assembler.open_gtid = event.gtid  # MySQL: BEGIN follows, or a DDL statement
        return None
    if isinstance(event, XidEvent):
        return assembler.commit(Commit(end, event.timestamp))
    if isinstance(event, QueryEvent):
        sql = event.query.strip() if isinstance(event.query, str) else str(event.query)
        word = sql.upper()
        if word == "BEGIN":
            assembler.begin(Begin(assembler.open_gtid))
            return None
        if word == "COMMIT":
            return assembler.commit(Commit(end, event.timestamp))
        if assembler.is_open:
            return None  # a statement inside a transaction (SAVEPOINT): its rows come as rows
        database = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema)
        statement = Statement(sql, database, end, event.timestamp)
        assembler.statement(statement)
        return statement
    name = f"{event.schema}.{event.table}"
    if name not in captured:
        return None
    if isinstance(event, UpdateRowsEvent):
        changes = tuple(
            RowChange(name, "u", row_values(row["before_values"]), row_values(row["after_values"]))
            for row in event.rows
        )
    elif isinstance(event, DeleteRowsEvent):
        changes = tuple(RowChange(name, "d", row_values(r["values"]), None) for r in event.rows)
    else:
        changes = tuple(RowChange(name, "c", None, row_values(r["values"])) for r in event.rows)
    assembler.rows(Rows(changes))
    return None
