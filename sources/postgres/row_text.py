"""A table's rows read with ``COPY ... TO STDOUT``, rendered natively to ``key``/``after`` texts.

The snapshot (both modes) reads every row of the captured tables. Rendering a row in Python
(parse each value, build a dict, ``json.dumps`` the key and the row) cost about 10 us; the
connector's native module (``sources/postgres/native``, Rust) renders the ``COPY`` text output
straight into Arrow string arrays, with the same rules (:func:`kind_of`), so a snapshot row reads
text for text like the same row streamed by wal2json or pgoutput.

Runs wherever a snapshot is read: executors (incremental chunks) or the snapshot's reader thread
(``snapshot=initial``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from psycopg import sql

from ._native import RowRenderer
from .tables import FLOAT_TYPES, INTEGER_TYPES, TableInfo

__all__ = ["TEXT", "copy_rows", "kind_of"]

TEXT, INTEGER, NUMERIC, FLOAT, BOOLEAN = range(5)
"""Kinds of column (codes the native renderer knows): how a column's text becomes JSON."""

_BLOCK_ROWS = 4_096  # rows handed to the renderer at once


def kind_of(type_name: str) -> int:
    """How a column of PostgreSQL type ``type_name`` (``format_type`` spelling) is rendered."""
    if type_name in INTEGER_TYPES:
        return INTEGER
    if type_name.startswith(("numeric", "decimal")):
        return NUMERIC
    if type_name in FLOAT_TYPES:
        return FLOAT
    if type_name == "boolean":
        return BOOLEAN
    return TEXT


def copy_rows(
    conn: Any, table: TableInfo, query: sql.Composable, batch_rows: int | None = None
) -> Iterator[tuple[pa.StringArray, pa.StringArray]]:
    """Run ``query`` (``table``'s :meth:`~.tables.TableInfo.select_text` columns) as ``COPY``.

    Yields ``(keys, afters)`` per ``batch_rows`` rows (None: all in one), ``keys`` in the key's
    column order and null for a table without a key. Nothing is yielded for no rows.
    """
    names = [name for name, _ in table.columns]
    renderer = RowRenderer(
        [kind_of(type_name) for _, type_name in table.columns],
        names,
        [names.index(name) for name in table.key_in_column_order],
    )
    blocks: list[Any] = []
    with conn.cursor() as cursor, cursor.copy(sql.SQL("COPY ({}) TO STDOUT").format(query)) as copy:
        for data in copy:  # one row per block in text COPY
            blocks.append(data)
            if len(blocks) >= _BLOCK_ROWS:
                renderer.feed(b"".join(blocks))
                blocks.clear()
                if batch_rows is not None and renderer.rows >= batch_rows:
                    yield renderer.finish()
        renderer.feed(b"".join(blocks))
    if renderer.rows:
        yield renderer.finish()
