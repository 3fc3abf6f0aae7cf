"""Primary-key chunks of a MySQL/MariaDB table: where the next one ends, and reading one.

``snapshot=incremental`` reads a table as consecutive key ranges ``(after, upto]``
(:class:`~spark_ckpt.sources.chunks.ChunkBounds`), each on a connection of its own with no lock
(Flink CDC's ``MySqlSnapshotSplitReadTask``: binlog positions as low and high watermarks, no
write to the database, so the user needs no write grant). The driver finds each chunk's end with
one index scan (:func:`next_chunk`); an executor reads it (:func:`read_chunk`):

- MariaDB reports the binlog position of a consistent snapshot's view without a lock
  (``binlog_snapshot_file``/``binlog_snapshot_position``): the chunk is the table at exactly that
  position, which is both its watermarks.
- MySQL does not: the binlog's end is read before the read (low) and after it (high). A commit
  is written to the binlog before it is visible, so the window starts no later than the planning
  batch's start as well (the connector's ``since``), which the driver had read from the binlog
  before the chunk was read.

Rows are rendered as the initial snapshot's and the binlog's are (:mod:`.values`). Keys travel as
text and are compared in SQL as their columns' types (integers as integers, decimals cast,
binary strings unhexed), ordered by the server's own collation.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_ckpt.errors import SourceConnectionError, TableCaptureError
from spark_ckpt.state.storage import Location
from spark_ckpt.testing.faults import crash_point

from ..chunk_spill import chunk_files, write_chunk_rows
from ..chunks import ChunkBounds, Key, PendingChunk
from ..snapshot_spill import FILE_ROWS
from .binlog_offset import BinlogPosition
from .catalog import table_columns
from .queried_rows import queried_rows
from .schemas import ColumnsSignature, columns_signature
from .snapshot import binlog_end
from .types import FieldType, MySqlColumn

if TYPE_CHECKING:
    from pymysql.connections import Connection

__all__ = [
    "ChunkRead",
    "ChunkReadPartition",
    "load_read",
    "next_chunk",
    "read_chunk",
    "run_chunk_read",
]

_INTEGERS = frozenset(
    {FieldType.TINY, FieldType.SHORT, FieldType.LONG, FieldType.LONGLONG, FieldType.INT24}
)
_DECIMALS = frozenset({FieldType.DECIMAL, FieldType.NEWDECIMAL})


def _quoted(name: str) -> str:
    return f"`{name.replace('`', '``')}`"


def _table(name: str) -> str:
    database, table = name.split(".")
    return f"{_quoted(database)}.{_quoted(table)}"


def key_text(value: Any) -> str:
    """A key column's value as a query returned it -> the bound's text (driver, per chunk)."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def _param(column: MySqlColumn, text: str) -> tuple[str, Any]:
    """The SQL placeholder and parameter comparing ``column`` with a bound's text."""
    if column.code in _INTEGERS:
        return "%s", int(text)  # exact: a string would be compared as a double
    if column.code in _DECIMALS:
        return f"CAST(%s AS DECIMAL({column.precision or 65},{column.scale or 0}))", text
    if column.is_binary:
        return "UNHEX(%s)", text
    return "%s", text


def _after(columns: list[MySqlColumn], key: Key) -> tuple[str, list[Any]]:
    """``key columns > key`` as nested comparisons (an index range on MySQL and MariaDB)."""
    params: list[Any] = []
    terms: list[str] = []
    for i in range(len(columns)):
        parts = []
        for j in range(i + 1):
            placeholder, value = _param(columns[j], key[j])
            parts.append(f"{_quoted(columns[j].name)} {'>' if j == i else '='} {placeholder}")
            params.append(value)
        terms.append("(" + " AND ".join(parts) + ")")
    return "(" + " OR ".join(terms) + ")", params


def _where(
    columns: list[MySqlColumn], after: Key | None, upto: Key | None
) -> tuple[str, list[Any]]:
    conditions: list[str] = []
    params: list[Any] = []
    if after is not None:
        sql, values = _after(columns, after)
        conditions.append(sql)
        params += values
    if upto is not None:
        sql, values = _after(columns, upto)
        conditions.append(f"NOT {sql}")
        params += values
    return (" WHERE " + " AND ".join(conditions) if conditions else ""), params


def _key_columns(conn: Connection[Any], name: str, key: tuple[str, ...]) -> list[MySqlColumn]:
    by_name = {c.name: c for c in table_columns(conn, name)}
    return [by_name[k] for k in key]


def next_chunk(
    conn: Connection[Any], name: str, key: tuple[str, ...], index: int, after: Key | None, rows: int
) -> ChunkBounds:
    """The chunk after ``after``: up to the ``rows``-th key beyond it (driver, per chunk).

    The last chunk of a table (fewer keys left) is open-ended: ``upto`` is None.
    """
    if not key:
        raise TableCaptureError(
            f"table {name} has no primary key, so snapshot=incremental cannot split it into key "
            f"ranges. Add a primary key, or use snapshot=initial"
        )
    columns = _key_columns(conn, name, key)
    where, params = _where(columns, after, None)
    order = ", ".join(_quoted(k) for k in key)
    listed = ", ".join(_quoted(k) for k in key)
    with conn.cursor() as cursor:
        cursor.execute(
            f"SELECT {listed} FROM {_table(name)}{where} ORDER BY {order} "
            f"LIMIT 1 OFFSET {int(rows) - 1}",
            params,
        )
        row = cursor.fetchone()
    upto = None if row is None else tuple(key_text(v) for v in row)
    return ChunkBounds(name, index, after, upto)


@dataclass(frozen=True)
class ChunkRead:
    """What an executor's read of a chunk left in the spill beside its rows.

    Attributes
    ----------
    rows
        Rows read.
    low, high
        The binlog's watermarks around the read (:attr:`BinlogPosition.ordinal`): the read
        saw every commit before ``low`` and none after ``high`` (equal on MariaDB).
    read_at_us
        When (the rows' ``commit_ts``).
    columns
        The table's columns as the read saw them (:func:`.schemas.columns_signature`): the
        driver places the rows only where the stream's schema of the table is the same. None
        in a read spilled before reads recorded them.
    """

    rows: int
    low: int
    high: int
    read_at_us: int
    columns: ColumnsSignature | None = None

    def to_bytes(self) -> bytes:
        """JSON."""
        body: dict[str, Any] = {
            "rows": self.rows,
            "low": self.low,
            "high": self.high,
            "readAtUs": self.read_at_us,
        }
        if self.columns is not None:
            body["columns"] = [list(c) for c in self.columns]
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> ChunkRead:
        """Parse :meth:`to_bytes`."""
        body = json.loads(raw)
        listed = body.get("columns")
        columns = None if listed is None else tuple((str(n), str(t), str(s)) for n, t, s in listed)
        return cls(
            int(body["rows"]), int(body["low"]), int(body["high"]), int(body["readAtUs"]), columns
        )


def read_chunk(
    conn: Connection[Any], bounds: ChunkBounds, key: tuple[str, ...]
) -> tuple[pa.Array, pa.Array, ChunkRead]:
    """Read a chunk's rows on ``conn`` (executor, once per chunk): keys, afters and the read."""
    import pymysql.cursors

    with conn.cursor() as cursor:
        cursor.execute("SET SESSION time_zone = '+00:00'")
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor.execute("SHOW SESSION STATUS LIKE 'binlog_snapshot_file'")
        exact = cursor.fetchone() is not None
        low = None if exact else binlog_end(cursor)
        cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
        if exact:
            cursor.execute("SHOW SESSION STATUS LIKE 'binlog_snapshot_%'")
            status = {str(k).lower(): str(v) for k, v in cursor.fetchall()}
            low = BinlogPosition(
                status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
            )
        read_at = int(time.time() * 1_000_000)
        columns = table_columns(conn, bounds.table)
        by_name = {c.name: c for c in columns}
        where, params = _where([by_name[k] for k in key], bounds.after, bounds.upto)
        listed = ", ".join(_quoted(c.name) for c in columns)
        with conn.cursor(pymysql.cursors.SSCursor) as rows_cursor:
            rows_cursor.execute(f"SELECT {listed} FROM {_table(bounds.table)}{where}", params)
            server = f"{conn.host}:{conn.port}"
            parts = list(queried_rows(rows_cursor, columns, key, FILE_ROWS, server))
        conn.rollback()
        high = low if exact else binlog_end(cursor)
    assert low is not None
    assert high is not None
    keys = pa.concat_arrays([part[0] for part in parts]) if parts else pa.array([], pa.string())
    afters = pa.concat_arrays([part[1] for part in parts]) if parts else pa.array([], pa.string())
    read = ChunkRead(len(keys), low.ordinal, high.ordinal, read_at, columns_signature(columns))
    return keys, afters, read


@dataclass(frozen=True)
class ChunkReadPartition:
    """Read one chunk on an executor and spill it; yields no rows.

    ``settings`` are PyMySQL's connection arguments (with the password: never printed).
    """

    settings: dict[str, Any]
    key: tuple[str, ...]
    chunk: PendingChunk
    directory: Location

    def __repr__(self) -> str:  # the settings hold the password
        return f"ChunkReadPartition({self.chunk.name})"


def run_chunk_read(partition: ChunkReadPartition) -> None:
    """Read the chunk and write its rows, then its :class:`ChunkRead` (executor, per task).

    Written in that order, so a :class:`ChunkRead` names rows that are complete; a task run
    again overwrites both.
    """
    import pymysql

    try:
        conn = pymysql.connect(autocommit=True, **partition.settings)
    except pymysql.MySQLError as e:
        where = f"{partition.settings.get('host')}:{partition.settings.get('port')}"
        raise SourceConnectionError(
            f"the snapshot chunk {partition.chunk.name} cannot connect to {where} as user "
            f"{partition.settings.get('user')!r}: {e.args[-1] if e.args else type(e).__name__}"
        ) from None
    try:
        keys, afters, read = read_chunk(conn, partition.chunk.bounds, partition.key)
    finally:
        conn.close()
    crash_point("during_chunk_read", partition.chunk.bounds.index)
    rows_file, read_file = chunk_files(partition.directory, partition.chunk)
    write_chunk_rows(rows_file, keys, afters)
    read_file.write_bytes(read.to_bytes())


def load_read(directory: Location, chunk: PendingChunk) -> ChunkRead | None:
    """The chunk's :class:`ChunkRead`, or None when it was not read (driver)."""
    raw = chunk_files(directory, chunk)[1].read_bytes()
    return None if raw is None else ChunkRead.from_bytes(raw)
