"""MySQL's and MariaDB's column types, and the Spark SQL type each is mirrored as.

A column is described by what the binlog's table map says of it (with
``binlog_row_metadata=FULL``): its type code (MySQL's ``enum_field_types``,
``include/field_types.h``), signedness, decimal precision and scale, character set, ``BIT``
width and ``SET`` members. :func:`spark_type` names the type a typed mirror
(``columnTypes=true``) gives the column (:mod:`.values` gives each value's JSON form; the page
docs/connectors/mysql.md has both in one table):

- integers: ``TINYINT`` ``tinyint``, ``SMALLINT`` ``smallint``, ``MEDIUMINT`` and ``INT``
  ``int``, ``BIGINT`` ``bigint``; ``UNSIGNED`` one size up, ``BIGINT UNSIGNED``
  ``decimal(20,0)`` (its values reach 2^64 - 1);
- ``DECIMAL(p,s)`` ``decimal(p,s)`` up to Spark's 38 digits, ``string`` beyond (MySQL's go to 65);
- ``FLOAT`` ``float``, ``DOUBLE`` ``double``, ``YEAR`` ``smallint``;
- ``DATE`` ``date``, ``DATETIME`` ``timestamp_ntz``, ``TIMESTAMP`` ``timestamp`` (UTC);
- ``BINARY``, ``VARBINARY``, ``BLOB`` (the ``binary`` character set) and geometry ``binary``;
- ``BIT(1)`` ``boolean``, ``BIT(n)`` ``bigint`` (``decimal(20,0)`` for ``BIT(64)``);
- ``string`` for the rest: text in any character set, ``TIME`` (it may exceed a day),
  ``JSON``, ``ENUM``, ``SET``.

Pure Python; runs on the driver, per column of a table map.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum

__all__ = ["BINARY_CHARSET", "FieldType", "MySqlColumn", "spark_type", "types_json"]


class FieldType(IntEnum):
    """MySQL's column type codes as the binlog's table map carries them (``field_types.h``)."""

    DECIMAL = 0
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    TIME = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    TIMESTAMP2 = 17
    DATETIME2 = 18
    TIME2 = 19
    JSON = 245
    NEWDECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255


BINARY_CHARSET = "binary"
"""The character set of ``BINARY``, ``VARBINARY`` and ``BLOB`` columns (collation 63)."""

_STRINGS = frozenset(
    {
        FieldType.VARCHAR,
        FieldType.VAR_STRING,
        FieldType.STRING,
        FieldType.TINY_BLOB,
        FieldType.MEDIUM_BLOB,
        FieldType.LONG_BLOB,
        FieldType.BLOB,
    }
)
_INTEGERS = {
    # code: (signed type, unsigned type)
    FieldType.TINY: ("tinyint", "smallint"),
    FieldType.SHORT: ("smallint", "int"),
    FieldType.INT24: ("int", "int"),
    FieldType.LONG: ("int", "bigint"),
    FieldType.LONGLONG: ("bigint", "decimal(20,0)"),
}
_SIMPLE = {
    FieldType.FLOAT: "float",
    FieldType.DOUBLE: "double",
    FieldType.YEAR: "smallint",
    FieldType.DATE: "date",
    FieldType.NEWDATE: "date",
    FieldType.DATETIME: "timestamp_ntz",
    FieldType.DATETIME2: "timestamp_ntz",
    FieldType.TIMESTAMP: "timestamp",
    FieldType.TIMESTAMP2: "timestamp",
    FieldType.GEOMETRY: "binary",
}
_ZONED = frozenset({FieldType.TIMESTAMP, FieldType.TIMESTAMP2})
_MAX_DECIMAL_PRECISION = 38
"""Spark's (and Delta's) widest decimal; MySQL's goes to 65 digits."""


@dataclass(frozen=True)
class MySqlColumn:
    """One column as the binlog's table map describes it.

    Parameters
    ----------
    name
        The column's name.
    code
        Its type code (:class:`FieldType`; ``ENUM`` and ``SET`` as the table map resolves them).
    unsigned
        Whether an integer column is ``UNSIGNED``.
    precision, scale
        A ``DECIMAL``'s digits in all and after the point.
    charset
        A character column's character set (``binary`` for binary strings).
    bits
        A ``BIT`` column's width.
    fsp
        A ``TIME``, ``DATETIME`` or ``TIMESTAMP`` column's fractional digits (0 to 6).
    length
        A ``BINARY(n)`` column's n: the binlog drops a value's trailing zero bytes, which the
        column keeps (MySQL's ``Field_string::pack``).
    members
        An ``ENUM``'s or ``SET``'s members in their declared order.
    primary
        Whether the column is part of the primary key.
    """

    name: str
    code: int
    unsigned: bool = False
    precision: int | None = None
    scale: int | None = None
    charset: str | None = None
    bits: int | None = None
    fsp: int = 0
    length: int | None = None
    members: tuple[str, ...] = ()
    primary: bool = False

    @property
    def fixed_binary_length(self) -> int | None:
        """The byte length of a ``BINARY(n)`` column (None for any other)."""
        if self.code == FieldType.STRING and self.charset == BINARY_CHARSET:
            return self.length
        return None

    @property
    def is_binary(self) -> bool:
        """Whether the column holds bytes rather than text."""
        if self.code == FieldType.GEOMETRY:
            return True
        return self.code in _STRINGS and self.charset == BINARY_CHARSET


def spark_type(column: MySqlColumn) -> str:
    """The Spark SQL type a typed mirror gives ``column`` (see the module's table)."""
    code = column.code
    if code in _INTEGERS:
        signed, unsigned = _INTEGERS[FieldType(code)]
        return unsigned if column.unsigned else signed
    if code in _SIMPLE:
        return _SIMPLE[FieldType(code)]
    if code in (FieldType.NEWDECIMAL, FieldType.DECIMAL):
        precision, scale = column.precision, column.scale
        if precision is None or scale is None or precision > _MAX_DECIMAL_PRECISION:
            return "string"
        return f"decimal({precision},{scale})"
    if code == FieldType.BIT:
        bits = column.bits or 1
        return "boolean" if bits == 1 else "bigint" if bits < 64 else "decimal(20,0)"
    if column.is_binary:
        return "binary"
    return "string"  # text, TIME, JSON, ENUM, SET


def types_json(columns: tuple[MySqlColumn, ...]) -> str:
    """The ``column_types`` text of a table map's columns, in column order."""
    return json.dumps(
        {column.name: spark_type(column) for column in columns},
        separators=(",", ":"),
        ensure_ascii=False,
    )
