"""The captured tables' columns as the server's catalog describes them, for the snapshot.

The snapshot reads rows with a query, not from the binlog, so no table map describes them. The
catalog (``information_schema.COLUMNS``) does: each column becomes the :class:`~.types.MySqlColumn`
a table map with ``binlog_row_metadata=FULL`` gives the same column (the type code the binlog
writes, MySQL's ``Field::binlog_type``: ``DATETIME2``, ``TIMESTAMP2``, ``TIME2``,
``NEWDECIMAL``, ``BLOB`` for every blob and text type, ``STRING`` for ``CHAR`` and ``BINARY``,
``VARCHAR`` for ``VARCHAR`` and ``VARBINARY``), so a snapshot's row gets the same JSON values
(:func:`~.values.row_values`), the same ``column_types`` and the same schema as a row of the
binlog. MariaDB's ``JSON`` is ``LONGTEXT`` in its catalog, as in its binlog. Runs on the driver,
once per captured table per snapshot.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from spark_ckpt.errors import TableCaptureError

from .types import BINARY_CHARSET, FieldType, MySqlColumn

if TYPE_CHECKING:
    from pymysql.connections import Connection

__all__ = ["estimated_rows", "table_columns"]

_CODES = {
    "tinyint": FieldType.TINY,
    "smallint": FieldType.SHORT,
    "mediumint": FieldType.INT24,
    "int": FieldType.LONG,
    "integer": FieldType.LONG,
    "bigint": FieldType.LONGLONG,
    "decimal": FieldType.NEWDECIMAL,
    "numeric": FieldType.NEWDECIMAL,
    "float": FieldType.FLOAT,
    "double": FieldType.DOUBLE,
    "real": FieldType.DOUBLE,
    "bit": FieldType.BIT,
    "date": FieldType.DATE,
    "datetime": FieldType.DATETIME2,
    "timestamp": FieldType.TIMESTAMP2,
    "time": FieldType.TIME2,
    "year": FieldType.YEAR,
    "char": FieldType.STRING,
    "binary": FieldType.STRING,
    "varchar": FieldType.VARCHAR,
    "varbinary": FieldType.VARCHAR,
    "tinyblob": FieldType.BLOB,
    "blob": FieldType.BLOB,
    "mediumblob": FieldType.BLOB,
    "longblob": FieldType.BLOB,
    "tinytext": FieldType.BLOB,
    "text": FieldType.BLOB,
    "mediumtext": FieldType.BLOB,
    "longtext": FieldType.BLOB,
    "enum": FieldType.ENUM,
    "set": FieldType.SET,
    "json": FieldType.JSON,
    "geometry": FieldType.GEOMETRY,
    "point": FieldType.GEOMETRY,
    "linestring": FieldType.GEOMETRY,
    "polygon": FieldType.GEOMETRY,
    "multipoint": FieldType.GEOMETRY,
    "multilinestring": FieldType.GEOMETRY,
    "multipolygon": FieldType.GEOMETRY,
    "geometrycollection": FieldType.GEOMETRY,
    "geomcollection": FieldType.GEOMETRY,
}
_BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})
_MEMBER = re.compile(r"'((?:[^']|'')*)'")
"""One quoted member of an ``enum(...)`` or ``set(...)`` column type (a quote doubled inside)."""


def table_columns(conn: Connection[Any], name: str) -> tuple[MySqlColumn, ...]:
    """``database.table``'s columns in their order, described as its table map would be.

    Raises
    ------
    TableCaptureError
        When the table has no columns in the catalog (it was dropped), or a column's type has no
        binlog type this connector knows (its snapshot values could differ from its binlog's).
    """
    database, table = name.split(".")
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE, "
            "DATETIME_PRECISION, CHARACTER_SET_NAME, CHARACTER_OCTET_LENGTH, COLUMN_KEY "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        rows = cursor.fetchall()
    if not rows:
        raise TableCaptureError(f"table {name} has no columns in the catalog: was it dropped?")
    return tuple(_column(name, *row) for row in rows)


def _column(
    table: str,
    name: Any,
    data_type: Any,
    column_type: Any,
    precision: Any,
    scale: Any,
    fsp: Any,
    charset: Any,
    octets: Any,
    key: Any,
) -> MySqlColumn:
    kind = str(data_type).lower()
    full = str(column_type).lower()
    code = _CODES.get(kind)
    if code is None:
        raise TableCaptureError(
            f"column {name!r} of table {table} has type {column_type!r}, which the mysql "
            f"connector's snapshot cannot read as its binlog writes it; leave the table out of "
            f"'tables', or use snapshot=never"
        )
    binary = kind in _BINARY_TYPES
    members: tuple[str, ...] = ()
    if code in (FieldType.ENUM, FieldType.SET):
        inner = str(column_type)[str(column_type).index("(") + 1 : str(column_type).rindex(")")]
        members = tuple(m.replace("''", "'") for m in _MEMBER.findall(inner))
    decimal = code == FieldType.NEWDECIMAL
    temporal = code in (FieldType.DATETIME2, FieldType.TIMESTAMP2, FieldType.TIME2)
    return MySqlColumn(
        name=str(name),
        code=int(code),
        # YEAR is unsigned in the table map's signedness (``Field_year`` is an unsigned
        # ``Field_tiny``), though its catalog type does not say so.
        unsigned="unsigned" in full or code == FieldType.YEAR,
        precision=int(precision) if decimal and precision is not None else None,
        scale=int(scale) if decimal and scale is not None else None,
        charset=BINARY_CHARSET if binary else (str(charset) if charset else None),
        bits=int(precision) if code == FieldType.BIT and precision is not None else None,
        fsp=int(fsp or 0) if temporal else 0,
        length=int(octets) if kind == "binary" and octets is not None else None,
        members=members,
        primary=str(key).upper() == "PRI",
    )


def estimated_rows(conn: Connection[Any], tables: tuple[str, ...]) -> int | None:
    """The server's estimate of the tables' rows (``information_schema.TABLES``); None if none."""
    total = 0
    with conn.cursor() as cursor:
        for name in tables:
            database, table = name.split(".")
            cursor.execute(
                "SELECT TABLE_ROWS FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (database, table),
            )
            row = cursor.fetchone()
            if row is None or row[0] is None:
                return None
            total += int(row[0])
    return total or None
