"""Reading the binlog over the replication protocol: the client's events as transactions.

``mysql-replication`` (PyPI; built on PyMySQL) registers as a replica with the options' server
id, asks for the binlog from a file and position (``COM_BINLOG_DUMP``, non-blocking: the server
sends what it has, then end-of-file) and decodes the row events with the table map's full
metadata (``binlog_row_metadata=FULL``), so each row is decoded with the columns it was written
with. Both servers are read by file and position, or from a GTID state on a server that did not
write the offset (MariaDB: ``@slave_connect_state``; MySQL: ``COM_BINLOG_DUMP_GTID``); the GTID
each transaction carries advances the offset's GTID state. Runs on the driver, once per trigger
(a connection per read).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from spark_ckpt.errors import DataLossError, SourceConnectionError

from . import table_map_reuse, time2
from .binlog_offset import BinlogPosition, GtidStart
from .gtid import is_mariadb_state, reached
from .schemas import SchemaTracker
from .transactions import (
    Begin,
    BinlogTransaction,
    Commit,
    RowChange,
    Rows,
    Statement,
    TransactionAssembler,
)
from .types import MySqlColumn, types_json
from .values import row_values

if TYPE_CHECKING:
    from .options import MySqlOptions

__all__ = ["TableMaps", "feed", "read_transactions", "wanted_events"]

_GTID_NOT_FOUND = 1236
"""``ER_MASTER_FATAL_ERROR_READING_BINLOG``: what a server answers a replica whose start (file,
or GTID state) is not in its binlog: purged, or another history."""

_MARIADB_STANDALONE = 0x01
"""MariaDB's GTID event flag ``FL_STANDALONE``: the event group is one statement (DDL), with no
``XID`` or ``COMMIT`` after it (MariaDB's ``log_event.h``)."""


def read_transactions(
    options: MySqlOptions,
    settings: dict[str, Any],
    start: BinlogPosition | GtidStart,
    assembler: TransactionAssembler,
    tracker: SchemaTracker,
    stop: BinlogPosition | GtidStart | None = None,
) -> Iterator[BinlogTransaction | Statement]:
    """Committed transactions of captured tables, and standalone statements, after ``start``.

    Reads until the binlog's current end, or until the event ending at ``stop`` (a position),
    or the commit that reaches ``stop`` (a GTID state). ``assembler.gtid_state`` must be the
    GTID state at ``start``: each commit advances it. Statements are
    yielded so the caller can tell whether one changes a captured table (and let ``tracker``
    follow it); the assembler keeps what a transaction still open at the end read
    (:attr:`~.TransactionAssembler.held_changes`). A table map that changes a captured table's
    schema puts its schema change ahead of the rows written under it.

    Raises
    ------
    SourceConnectionError
        When the server cannot be read (the message names the endpoint, never the password).
    DataLossError
        When the server does not have the binlog from a GTID ``start`` on (purged, or another
        GTID history).
    """
    import pymysql
    from pymysqlreplication import BinLogStreamReader

    time2.install()
    table_map_reuse.install()
    captured = frozenset(options.tables)
    table_maps = TableMaps()
    where: dict[str, Any] = (
        {"auto_position": start.gtid, "is_mariadb": is_mariadb_state(start.gtid)}
        if isinstance(start, GtidStart)
        else {"log_file": start.file, "log_pos": start.pos}
    )
    stream = BinLogStreamReader(
        connection_settings=dict(settings),
        server_id=options.server_id,
        resume_stream=True,
        blocking=False,
        **where,
        only_events=wanted_events(),
        only_schemas=sorted({name.split(".")[0] for name in captured}),
        enable_logging=False,
    )
    try:
        while True:
            try:
                event = stream.fetchone()
            except pymysql.MySQLError as e:
                if isinstance(start, GtidStart) and e.args and e.args[0] == _GTID_NOT_FOUND:
                    raise DataLossError(
                        f"the checkpoint resumes after GTID {start.gtid}, but "
                        f"{options.host}:{options.port} cannot send its binlog from there "
                        f"({e.args[-1]}): the changes after the checkpoint were purged from "
                        f"its binlog, or it does not have the GTID history of the server the "
                        f"checkpoint was written on. Start over with a new checkpointLocation; "
                        f"fail over only to a replica with log_slave_updates and the same GTIDs"
                    ) from None
                raise SourceConnectionError(
                    f"reading the binlog of {options.host}:{options.port} from {start} failed: "
                    f"{e.args[-1] if e.args else e}"
                ) from None
            if event is None:
                return
            end = BinlogPosition(stream.log_file, stream.log_pos)
            found = feed(assembler, event, end, captured, table_maps, tracker)
            if found is not None:
                yield found
            if isinstance(stop, BinlogPosition) and end >= stop:
                return
            if isinstance(stop, GtidStart) and found is not None and _reached(assembler, stop):
                return
    finally:
        stream.close()


def _reached(assembler: TransactionAssembler, stop: GtidStart) -> bool:
    return reached(assembler.gtid_state, stop.gtid)


def wanted_events() -> list[type]:
    """The client's event classes :func:`feed` takes (the reader asks for these only)."""
    from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    return [
        GtidEvent,
        MariadbGtidEvent,
        QueryEvent,
        XidEvent,
        WriteRowsEvent,
        UpdateRowsEvent,
        DeleteRowsEvent,
    ]


def _committed(
    assembler: TransactionAssembler, tracker: SchemaTracker, commit: Commit
) -> BinlogTransaction | None:
    """Close the open transaction, with the schemas as delivered up to its end."""
    txn = assembler.commit(commit)
    tracker.commit()
    return None if txn is None else replace(txn, schemas=tracker.state)


class TableMaps:
    """The columns of each table map read, described once per map rather than per row event.

    A row event points at the table map before it (by table id); the client replaces the map
    when the server writes a new one (after DDL, and in each binlog file), so a description is
    reused only while the client's column list is the same object. Driver, per read.
    """

    def __init__(self) -> None:
        self._described: dict[int, tuple[object, dict[str, MySqlColumn], str]] = {}

    def columns(self, event: Any) -> tuple[dict[str, MySqlColumn], str]:
        """A row event's columns by name, and their ``column_types`` text (per row event)."""
        known = self._described.get(event.table_id)
        if known is not None and known[0] is event.columns:
            return known[1], known[2]
        described = tuple(_column(column) for column in event.columns)
        by_name = {column.name: column for column in described}
        self._described[event.table_id] = (event.columns, by_name, types_json(described))
        return by_name, self._described[event.table_id][2]


def _column(column: Any) -> MySqlColumn:
    """The client's column of a table map -> its description (``binlog_row_metadata=FULL``)."""
    bits = getattr(column, "bits", None)
    return MySqlColumn(
        name=str(column.name),
        code=int(column.type),
        unsigned=bool(column.unsigned),
        precision=getattr(column, "precision", None),
        scale=getattr(column, "decimals", None),
        charset=column.character_set_name,
        bits=int(bits) if bits is not None else None,
        fsp=int(getattr(column, "fsp", 0) or 0),
        length=getattr(column, "max_length", None),
        members=tuple(column.set_values or (column.enum_values or [""])[1:]),
        primary=bool(getattr(column, "is_primary", False)),
    )


def feed(
    assembler: TransactionAssembler,
    event: Any,
    end: BinlogPosition,
    captured: frozenset[str],
    table_maps: TableMaps,
    tracker: SchemaTracker,
) -> BinlogTransaction | Statement | None:
    """One client event into the assembler; what it completed, if anything.

    Driver, per event read (also the unit tests' entry for replayed events).
    """
    from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent

    if isinstance(event, MariadbGtidEvent):
        if event.flags & _MARIADB_STANDALONE:
            assembler.open_gtid = event.gtid  # the statement after it advances the GTID state
        else:
            assembler.begin(Begin(event.gtid))
        return None
    if isinstance(event, GtidEvent):
        assembler.open_gtid = event.gtid  # MySQL: BEGIN follows, or a DDL statement
        return None
    if isinstance(event, XidEvent):
        return _committed(assembler, tracker, Commit(end, event.timestamp))
    if isinstance(event, QueryEvent):
        sql = event.query.strip() if isinstance(event.query, str) else str(event.query)
        word = sql.upper()
        if word == "BEGIN":
            assembler.begin(Begin(assembler.open_gtid))
            return None
        if word == "COMMIT":
            return _committed(assembler, tracker, Commit(end, event.timestamp))
        if assembler.is_open:
            return None  # a statement inside a transaction (SAVEPOINT): its rows come as rows
        database = event.schema.decode() if isinstance(event.schema, bytes) else str(event.schema)
        statement = Statement(sql, database, end, event.timestamp)
        assembler.statement(statement)
        tracker.commit()
        return statement
    name = f"{event.schema}.{event.table}"
    if name not in captured:
        return None
    columns, types = table_maps.columns(event)
    schema_change = tracker.observe(name, tuple(columns.values()))
    if schema_change is not None:
        assembler.rows(Rows((RowChange(name, "s", None, None, None, schema_change),)))
    if isinstance(event, UpdateRowsEvent):
        changes = tuple(
            RowChange(
                name,
                "u",
                row_values(row["before_values"], columns, row.get("before_none_sources")),
                row_values(row["after_values"], columns, row.get("after_none_sources")),
                types,
            )
            for row in event.rows
        )
    else:
        op: Literal["c", "d"] = "d" if isinstance(event, DeleteRowsEvent) else "c"
        images = [row_values(r["values"], columns, r.get("none_sources")) for r in event.rows]
        changes = tuple(
            RowChange(name, op, image if op == "d" else None, None if op == "d" else image, types)
            for image in images
        )
    assembler.rows(Rows(changes))
    return None
