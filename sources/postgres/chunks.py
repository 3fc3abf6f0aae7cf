"""Primary-key chunks of a table: where the next one ends, and reading one with its snapshot.

The incremental snapshot reads a table as consecutive key ranges ``(after, upto]``, each in a
short transaction of its own (no lock or exported snapshot held for the whole table). The
driver finds each chunk's end with one index scan of ``rows`` keys (:func:`next_chunk`); any
process that can connect reads it (:func:`read_chunk`) and records the MVCC snapshot it read
at and the WAL insert position after it (:class:`~.visibility.ChunkSnapshot`), which the
watermark rule needs. Keys travel as their text forms and are cast back to the columns' types
in SQL, so ordering is PostgreSQL's own (collations included).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from spark_ckpt.errors import TableCaptureError

from ..chunks import ChunkBounds, Key
from .connect import connect
from .lsn import parse_lsn
from .row_text import copy_rows
from .tables import TableInfo
from .visibility import ChunkSnapshot

__all__ = ["ChunkBounds", "ChunkRows", "next_chunk", "read_chunk", "require_key"]

_NO_ROWS = (pa.array([], pa.string()), pa.array([], pa.string()))


@dataclass(frozen=True)
class ChunkRows:
    """A chunk as read: its rows' ``key`` and ``after`` texts, and the snapshot it was read at."""

    keys: pa.StringArray
    afters: pa.StringArray
    snapshot: ChunkSnapshot
    read_at_us: int
    racing: tuple[int, ...] = ()
    """Transactions in the snapshot's in-progress list that had committed by the read's end
    (32-bit xids): a commit is written to the WAL before it becomes visible, and with
    synchronous replication that gap can be long, so these may have committed before the
    chunk's window; the connector checks they are in it."""


def require_key(table: TableInfo) -> None:
    """Refuse a table the incremental snapshot cannot split (no primary key).

    Raises
    ------
    TableCaptureError
        Naming the table and the two ways out.
    """
    if not table.key:
        raise TableCaptureError(
            f"table {table.name} has no primary key, so snapshot=incremental cannot split it "
            f"into key ranges. Add a primary key, or use snapshot=initial (one consistent "
            f"snapshot, not resumable)"
        )


def _key_types(table: TableInfo) -> list[str]:
    types = dict(table.columns)
    return [types[name] for name in table.key]


def _bound(table: TableInfo, op: str, key: Key) -> sql.Composable:
    """``(k1, k2) <op> ($1::t1, $2::t2)``, the key given as text."""
    columns = sql.SQL(", ").join(sql.Identifier(name) for name in table.key)
    values = sql.SQL(", ").join(
        sql.SQL("{}::{}").format(sql.Literal(text), sql.SQL(type_name))
        for text, type_name in zip(key, _key_types(table), strict=True)
    )
    return sql.SQL("({}) {} ({})").format(columns, sql.SQL(op), values)


def _where(table: TableInfo, after: Key | None, upto: Key | None) -> sql.Composable:
    conditions = []
    if after is not None:
        conditions.append(_bound(table, ">", after))
    if upto is not None:
        conditions.append(_bound(table, "<=", upto))
    if not conditions:
        return sql.SQL("")
    return sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conditions)


def _order(table: TableInfo) -> sql.Composable:
    # Qualified: a bare name would mean the select list's ``col::text`` of the same name, and
    # sort the key as text.
    return sql.SQL(" ORDER BY ") + sql.SQL(", ").join(
        sql.Identifier(table.schema, table.table, n) for n in table.key
    )


def next_chunk(
    conn: psycopg.Connection[Any], table: TableInfo, index: int, after: Key | None, rows: int
) -> ChunkBounds:
    """The chunk after ``after``: up to the ``rows``-th key beyond it (driver, per chunk).

    The last chunk of a table (fewer keys left) is open-ended: ``upto`` is None.
    """
    require_key(table)
    keys = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in table.key)
    query = (
        sql.SQL("SELECT {} FROM {}.{}").format(
            keys, sql.Identifier(table.schema), sql.Identifier(table.table)
        )
        + _where(table, after, None)
        + _order(table)
        + sql.SQL(" OFFSET {} LIMIT 1").format(sql.Literal(rows - 1))
    )
    row = conn.execute(query).fetchone()
    upto = None if row is None else tuple(str(v) for v in row)
    return ChunkBounds(table.name, index, after, upto)


def read_chunk(dsn: str, table: TableInfo, bounds: ChunkBounds) -> ChunkRows:
    """Read a chunk's rows in a transaction of its own (executor or driver, once per chunk).

    The snapshot is taken by the first statement (``pg_current_snapshot()``), so the rows show
    exactly the transactions it lists as seen. The same statement reads the high watermark, the
    WAL insert position: a record boundary, and past the commit record of every transaction the
    snapshot saw (a commit is inserted before it becomes visible). Rows are rendered as the
    snapshot phase renders them (``op='r'`` rows: key, after).
    """
    select = table.select_text() + _where(table, bounds.after, bounds.upto) + _order(table)
    with connect(dsn, autocommit=False) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        row = conn.execute(
            "SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn()::text"
        ).fetchone()
        assert row is not None
        snapshot_text, mark = str(row[0]), str(row[1])
        read_at = int(time.time() * 1_000_000)
        keys, afters = next(copy_rows(conn, table, select), _NO_ROWS)
        racing = conn.execute(
            "SELECT x::text FROM pg_snapshot_xip(pg_current_snapshot()) x "
            "WHERE pg_xact_status(x) = 'committed'"
        ).fetchall()
        conn.rollback()
    snapshot = ChunkSnapshot.parse(snapshot_text, parse_lsn(mark))
    return ChunkRows(keys, afters, snapshot, read_at, tuple(int(r[0]) % (1 << 32) for r in racing))
