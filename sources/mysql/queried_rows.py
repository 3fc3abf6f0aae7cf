"""A snapshot query's rows read from the connection and rendered natively, a file at a time.

PyMySQL sends the query and reads the result's column definitions (an unbuffered cursor); the
rows that follow are read here as the server sends them (MySQL's text protocol) and rendered by
the native module (:class:`._native.QueriedRows`) to the ``key`` and ``after`` texts a binlog
row of the same values gets. PyMySQL parsing each row and the connector rendering it in Python
cost about 40 us per row; the rows then stream at the speed of the connection. Runs where the
snapshot reads: the driver (``snapshot=initial``) or an executor (a chunk of the incremental
snapshot).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_ckpt.errors import ChangeDecodeError

from .server import next_bytes
from .table_map_columns import described

if TYPE_CHECKING:
    from .types import MySqlColumn

__all__ = ["queried_rows"]


def queried_rows(
    cursor: Any,
    columns: tuple[MySqlColumn, ...],
    key: tuple[str, ...],
    limit: int,
    where: str,
) -> Iterator[tuple[pa.StringArray, pa.StringArray]]:
    """The rows of the query ``cursor`` (PyMySQL's ``SSCursor``) just executed, rendered.

    ``columns`` are the query's select list, in order; ``key`` the key's columns. Yields the
    ``key`` and ``after`` texts of at most ``limit`` rows at a time, in the server's order.
    ``where`` names the server in errors.

    Raises
    ------
    SourceConnectionError
        When the connection fails. After any error here (or a consumer that stops early) the
        connection's socket is dropped: what it would read next is not known.
    pymysql.err.OperationalError
        When the server ends the query with an error, as PyMySQL raises it.
    ChangeDecodeError
        When a row cannot be rendered.
    """
    import pymysql

    from ._native import QueriedRows

    result = cursor._result
    connection = cursor.connection
    if result is None or not result.unbuffered_active:
        raise ValueError("queried_rows needs an unbuffered cursor with a result set to read")
    try:
        rows = QueriedRows([described(column, None) for column in columns], list(key))
        while not rows.ended:
            data = next_bytes(connection, where, "a snapshot's rows")
            try:
                rows.push(data)
            except ValueError as e:
                if len(e.args) == 2:  # the server's error packet: as PyMySQL raises it
                    raise pymysql.err.OperationalError(*e.args) from None
                raise ChangeDecodeError(f"a snapshot's row from {where}: {e}") from None
            while rows.ready >= limit:
                yield rows.take(limit)
        while rows.ready:
            yield rows.take(limit)
    except BaseException:
        # The rest of the result is unread: PyMySQL must not read it as the next reply. The
        # socket goes without COM_QUIT (_force_close), so the caller's own close() still
        # succeeds instead of raising "Already closed" over this exception.
        result.unbuffered_active = False
        connection._force_close()
        raise
    # The result's end was read here: the cursor has nothing left to drain.
    result.unbuffered_active = False
    result.connection = None
