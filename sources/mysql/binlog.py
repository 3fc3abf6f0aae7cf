"""Reading the binlog over the replication protocol: the server's events as transactions.

``mysql-replication`` (PyPI; built on PyMySQL) connects: it registers as a replica with the
options' server id and asks for the binlog from a file and position (``COM_BINLOG_DUMP``,
non-blocking: the server sends what it has, then end-of-file), or from a GTID state on a server
that did not write the offset (MariaDB: ``@slave_connect_state``; MySQL:
``COM_BINLOG_DUMP_GTID``). The stream's bytes then go to the native decoder
(:mod:`._native`, ``sources/mysql/native``: the events as ``mysql_common`` reads them, each row
rendered as the change store keeps it), and the client's own ``TableMapEvent`` describes each
table map the decoder meets (:mod:`.table_map_columns`, with ``binlog_row_metadata=FULL``), so
each row is decoded with the columns it was written with. The GTID each transaction carries
advances the offset's GTID state. Runs on the driver, once per trigger (a connection per read).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from spark_ckpt.errors import ChangeDecodeError, DataLossError, SourceConnectionError

from .binlog_offset import BinlogPosition, GtidStart
from .gtid import is_mariadb_state, reached
from .schemas import SchemaTracker
from .server import next_bytes
from .table_map_columns import TableMapColumns, described, text_codec
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
from .values import decoded_text

if TYPE_CHECKING:
    from ._native import BinlogDecoder
    from .options import MySqlOptions

__all__ = ["StreamEvents", "read_transactions"]

_GTID_NOT_FOUND = 1236
"""``ER_MASTER_FATAL_ERROR_READING_BINLOG``: what a server answers a replica whose start (file,
or GTID state) is not in its binlog: purged, or another history."""


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
    ChangeDecodeError
        When an event cannot be decoded.
    DataLossError
        When the server does not have the binlog from a GTID ``start`` on (purged, or another
        GTID history).
    """
    from pymysqlreplication import BinLogStreamReader

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
        enable_logging=False,
    )
    try:
        connection = _connected(stream, options, start)
        events = StreamEvents(
            frozenset(options.tables),
            assembler,
            tracker,
            TableMapColumns(stream._ctl_connection),
            bool(stream._BinLogStreamReader__use_checksum),
        )
        if isinstance(stop, BinlogPosition):
            events.decoder.set_stop(stop.file, stop.pos)
        while True:
            try:
                items = events.decoder.next_items()
            except ChangeDecodeError:
                raise  # a value Python's codecs refused (it names the column)
            except ValueError as e:
                raise ChangeDecodeError(
                    f"the binlog of {options.host}:{options.port} read from {start} holds an "
                    f"event that cannot be decoded: {e}; report it with the server's version"
                ) from None
            if not items:
                if events.decoder.ended:
                    return
                server = f"{options.host}:{options.port}"
                events.decoder.push(next_bytes(connection, server, f"the binlog (from {start})"))
                continue
            for item in items:
                found = events.handle(item, options, start)
                if found is not None:
                    yield found
                    if isinstance(stop, GtidStart) and _reached(assembler, stop):
                        return
    finally:
        stream.close()


def _connected(stream: Any, options: MySqlOptions, start: BinlogPosition | GtidStart) -> Any:
    """The client's replication connection, registered and dumping from ``start``."""
    import pymysql

    steps = ("_BinLogStreamReader__connect_to_stream", "_BinLogStreamReader__connect_to_ctl")
    if not all(callable(getattr(stream, step, None)) for step in steps):
        raise ImportError(
            "mysql-replication's BinLogStreamReader connects differently than the version "
            "spark-ckpt was written for; install the version spark-ckpt's mysql extra names "
            "(pip install 'spark-ckpt[mysql]')"
        )
    try:
        # What the client's own fetchone does before its first packet (mysql-replication 1.0).
        for step in steps:
            getattr(stream, step)()
    except pymysql.MySQLError as e:
        raise _read_error(
            e.args[0] if e.args else 0, str(e.args[-1] if e.args else e), options, start
        ) from None
    return stream._stream_connection


def _read_error(
    code: int, message: str, options: MySqlOptions, start: BinlogPosition | GtidStart
) -> Exception:
    if isinstance(start, GtidStart) and code == _GTID_NOT_FOUND:
        return DataLossError(
            f"the checkpoint resumes after GTID {start.gtid}, but "
            f"{options.host}:{options.port} cannot send its binlog from there "
            f"({message}): the changes after the checkpoint were purged from "
            f"its binlog, or it does not have the GTID history of the server the "
            f"checkpoint was written on. Start over with a new checkpointLocation; "
            f"fail over only to a replica with log_slave_updates and the same GTIDs"
        )
    return SourceConnectionError(
        f"reading the binlog of {options.host}:{options.port} from {start} failed: {message}"
    )


def _reached(assembler: TransactionAssembler, stop: GtidStart) -> bool:
    return reached(assembler.gtid_state, stop.gtid)


def _committed(
    assembler: TransactionAssembler, tracker: SchemaTracker, commit: Commit
) -> BinlogTransaction | None:
    """Close the open transaction, with the schemas as delivered up to its end."""
    txn = assembler.commit(commit)
    tracker.commit()
    return None if txn is None else replace(txn, schemas=tracker.state)


class StreamEvents:
    """The native decoder's items into the assembler (driver, per read of the binlog).

    Also the unit tests' entry for replayed packets (:meth:`BinlogDecoder.push_payload`).
    """

    def __init__(
        self,
        captured: frozenset[str],
        assembler: TransactionAssembler,
        tracker: SchemaTracker,
        describer: TableMapColumns,
        checksum: bool,
    ) -> None:
        from ._native import BinlogDecoder

        self.assembler, self.tracker, self.describer = assembler, tracker, describer
        self.decoder: BinlogDecoder = BinlogDecoder(sorted(captured), self._decode_text, checksum)
        self._columns: dict[int, tuple[MySqlColumn, ...]] = {}

    def handle(
        self, item: tuple[Any, ...], options: Any = None, start: Any = None
    ) -> BinlogTransaction | Statement | None:
        """One decoded item into the assembler; what it completed, if anything."""
        kind = item[0]
        assembler = self.assembler
        if kind == "rows":
            _, table_id, name, rows = item
            schema_change = self.tracker.observe(name, self._columns[table_id])
            if schema_change is not None:
                assembler.rows(Rows((RowChange(name, "s", None, None, None, schema_change),)))
            assembler.stored(rows)
            return None
        if kind == "gtid":
            _, gtid, mariadb, standalone = item
            if mariadb and not standalone:
                assembler.begin(Begin(gtid))  # MariaDB's GTID event opens the transaction
            else:
                # MySQL: BEGIN follows, or a DDL statement; MariaDB standalone: the statement
                # after it advances the GTID state
                assembler.open_gtid = gtid
            return None
        if kind == "xid":
            _, file, pos, timestamp = item
            return _committed(assembler, self.tracker, Commit(BinlogPosition(file, pos), timestamp))
        if kind == "query":
            return self._query(*item[1:])
        if kind == "map":
            _, table_id, name, payload, checksum = item
            columns = self.describer.columns(payload, checksum)
            self._columns[table_id] = columns
            self.decoder.describe(
                table_id,
                [described(c, text_codec(c.charset)) for c in columns],
                types_json(columns),
                list(assembler.keys[name]),
            )
            return None
        if kind == "fde":
            self.describer.format_description(item[1], item[2])
            return None
        if kind == "error":
            raise _read_error(item[1], item[2], options, start)
        return None  # "eof", "stop": the decoder has ended

    def _query(
        self, sql: str, database: str, file: str, pos: int, timestamp: int
    ) -> BinlogTransaction | Statement | None:
        assembler = self.assembler
        end = BinlogPosition(file, pos)
        sql = sql.strip()
        word = sql.upper()
        if word == "BEGIN":
            assembler.begin(Begin(assembler.open_gtid))
            return None
        if word == "COMMIT":
            return _committed(assembler, self.tracker, Commit(end, timestamp))
        if assembler.is_open:
            return None  # a statement inside a transaction (SAVEPOINT): its rows come as rows
        statement = Statement(sql, database, end, timestamp)
        assembler.statement(statement)
        self.tracker.commit()
        return statement

    def _decode_text(self, table_id: int, index: int, raw: bytes) -> str:
        """Text the native decoder leaves to Python's codecs (a character set not UTF-8)."""
        column = self._columns[table_id][index]
        return decoded_text(raw, column, text_codec(column.charset))
