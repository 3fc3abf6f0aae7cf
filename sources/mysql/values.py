"""MySQL's and MariaDB's column values as JSON values: the rules, stated in Python.

The native module renders the binlog's rows and the snapshot's (:mod:`._native`,
``sources/mysql/native``) by these rules; :func:`json_value`, :func:`row_values` and
:func:`queried_values` state them on the values PyMySQL and ``mysql-replication`` make, and the
unit tests hold the native renderers to them (``tests/unit/test_mysql_types.py``,
``tests/unit/test_mysql_queried_rows.py``). :func:`decoded_text` decodes the text the native
decoder leaves to Python's codecs.

The rules, per type, are the middle column of :mod:`.types`' table: integers (a ``BIGINT
UNSIGNED`` above 2^63 included) stay exact JSON numbers; ``DECIMAL`` keeps every digit as text
(Debezium's ``decimal.handling.mode=string``); a ``FLOAT`` is the shortest number that is the
same 32-bit float; ``DATE``, ``DATETIME`` and ``TIMESTAMP`` are ISO-8601 text with the column's
fractional digits, as MySQL prints them (``TIMESTAMP`` in UTC, with its offset); ``TIME`` is
``[-]HH:MM:SS[.fff]`` (it may exceed a day); binary strings are base64 (Debezium's
``binary.handling.mode=bytes`` in JSON); ``SET`` is its members in declared order joined by
commas; ``JSON`` is its compact text; ``BIT(1)`` a boolean, a wider ``BIT`` a number.

What the client decodes as None is not always SQL's NULL (``mysql-replication``'s
``none_sources``): a ``SET`` with no member is the empty string, as MySQL prints it; a zero date
(``0000-00-00``, allowed only outside strict SQL modes) is null, as in Debezium's MySQL
connector. Pure Python; :func:`decoded_text` runs on the driver, per value in a character set
other than UTF-8.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal, localcontext
from typing import Any

from spark_ckpt.errors import ChangeDecodeError

from .types import FieldType, MySqlColumn

__all__ = ["decoded_text", "json_value", "queried_values", "row_values", "time_text"]

_EMPTY_SET = "empty set"
"""``mysql-replication``'s ``NONE_SOURCE.EMPTY_SET``: the None it decoded is a ``SET`` with no
member."""
_ZONED = frozenset({FieldType.TIMESTAMP, FieldType.TIMESTAMP2})
_DATES = frozenset(
    {
        FieldType.DATE,
        FieldType.NEWDATE,
        FieldType.DATETIME,
        FieldType.DATETIME2,
        FieldType.TIMESTAMP,
        FieldType.TIMESTAMP2,
    }
)


@dataclass(frozen=True)
class _Document:
    """A ``JSON`` document parsed from a query's text.

    Its ``null`` is the document ``null``, not SQL's NULL, as the binlog's is.
    """

    value: Any


def row_values(
    row: Mapping[str, Any],
    columns: Mapping[str, MySqlColumn],
    none_sources: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A decoded row image -> its JSON values, column by column.

    ``none_sources`` says why the client decoded a column as None (absent: SQL's NULL).
    """
    reasons = none_sources or {}
    out: dict[str, Any] = {}
    for name, value in row.items():
        column = columns.get(name)
        if column is None:
            raise KeyError(f"column {name!r} is not in the table map")
        if value is None and reasons.get(name) == _EMPTY_SET:
            out[name] = ""
        else:
            out[name] = json_value(value, column)
    return out


def queried_values(row: Mapping[str, Any], columns: Mapping[str, MySqlColumn]) -> dict[str, Any]:
    """A row a query returned (PyMySQL, session time zone UTC) -> the binlog's JSON values.

    Two values come from a query in another form than from the binlog client: MySQL's ``JSON``
    arrives as its text (parsed here into the document the binlog holds), and a zero or invalid
    date (``0000-00-00``, ``2020-00-10``: PyMySQL cannot make a date of it and returns the text)
    is null, as the binlog client decodes it. Driver, per snapshot row.
    """
    image: dict[str, Any] = {}
    for name, value in row.items():
        code = columns[name].code
        if isinstance(value, str) and code == FieldType.JSON:
            value = _Document(json.loads(value))
        elif isinstance(value, str) and code in _DATES:
            value = None
        image[name] = value
    return row_values(image, columns)


def json_value(value: Any, column: MySqlColumn) -> Any:
    """One decoded value of ``column`` -> its JSON value, with nothing rounded.

    ``value`` is what the binlog client decoded, or what a query returned (PyMySQL): both give
    the same JSON value. A MySQL ``JSON`` value is the decoded document (a query's text is
    parsed first); MariaDB's ``JSON`` is ``LONGTEXT`` and stays the text it is.
    """
    if value is None:
        return None
    code = column.code
    if code == FieldType.JSON:
        document = value.value if isinstance(value, _Document) else value
        return json.dumps(_text_keys(document), separators=(",", ":"), ensure_ascii=False)
    if code == FieldType.BIT:
        return _bit(value, column)
    if code == FieldType.SET:
        return _set_text(value, column)
    if column.is_binary and isinstance(value, str):
        value = _empty_bytes(value, column)
    if code == FieldType.FLOAT and isinstance(value, float):
        return _float32(value)
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Decimal):
        return _decimal_text(value, column.scale)
    if isinstance(value, datetime):
        text = value.isoformat(" ", "seconds") + _fraction(value.microsecond, column.fsp)
        return f"{text}+00:00" if code in _ZONED else text
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return time_text(value, column.fsp)
    if isinstance(value, (bytes, bytearray)):
        if column.is_binary or column.charset is None:
            return base64.b64encode(_padded(bytes(value), column)).decode("ascii")
        return _decoded(bytes(value), column)
    return str(value)


def time_text(value: timedelta, fsp: int) -> str:
    """A ``TIME(fsp)`` value as MySQL prints it (it may be negative and exceed 24 hours)."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + _fraction(fraction, fsp)


def _fraction(micros: int, fsp: int) -> str:
    """The fractional seconds as MySQL prints a column of ``fsp`` digits (none for 0)."""
    return f".{micros:06d}"[: fsp + 1] if fsp else ""


def _empty_bytes(value: str, column: MySqlColumn) -> bytes:
    """The client reads a zero-length binary value as ``""`` (its packet's empty read)."""
    if value:
        raise ChangeDecodeError(
            f"the binary column {column.name!r} arrived as text from the binlog client: "
            f"{value[:40]!r}; report this with the column's definition"
        )
    return b""


def _decimal_text(value: Decimal, scale: int | None) -> str:
    """A ``DECIMAL(p,s)`` as MySQL prints it: fixed point, ``s`` digits after it.

    No exponent: ``Decimal("1E-10")`` (as PyMySQL returns ``0.0000000001``) prints in full.
    """
    if scale is not None and value.is_finite():
        with localcontext() as context:
            context.prec = 100  # MySQL's decimals have at most 65 digits
            value = value.quantize(Decimal(1).scaleb(-scale))
    return format(value, "f")


def _padded(value: bytes, column: MySqlColumn) -> bytes:
    """A ``BINARY(n)`` value with the trailing zero bytes the binlog dropped."""
    length = column.fixed_binary_length
    return value.ljust(length, b"\0") if length else value


def decoded_text(raw: bytes, column: MySqlColumn, codec: str | None) -> str:
    """A text value from the binlog, decoded as the binlog client decodes it.

    ``codec`` is the Python codec of the column's character set (None: UTF-8, the client's
    default where the table map names none). A codec Python lacks falls back to the character
    set's own name (:func:`_decoded`); bytes that are not text in it are an error.

    Raises
    ------
    ChangeDecodeError
        When the bytes are not text in the column's character set, or Python cannot decode it.
    """
    try:
        return raw.decode(codec or "utf-8")
    except LookupError:
        return _decoded(raw, column)
    except UnicodeDecodeError as e:
        raise ChangeDecodeError(
            f"column {column.name!r} holds bytes that are not {column.charset or 'utf8'} text "
            f"in the binlog ({e}); check the column's character set against what is written "
            f"to it"
        ) from None


def _decoded(value: bytes, column: MySqlColumn) -> str:
    """Text the client left undecoded: its character set has no Python codec of that name."""
    try:
        return value.decode(str(column.charset))
    except (LookupError, UnicodeDecodeError) as e:
        raise ChangeDecodeError(
            f"column {column.name!r} holds text in the character set {column.charset!r}, which "
            f"cannot be decoded here ({e}); convert the column to utf8mb4 (ALTER TABLE ... "
            f"CONVERT TO CHARACTER SET utf8mb4) or leave it out of the captured tables"
        ) from None


def _bit(value: Any, column: MySqlColumn) -> bool | int:
    """A ``BIT(n)`` value: the client gives a string of ``0``/``1``, a query gives bytes."""
    if isinstance(value, str):
        number = int(value, 2) if value else 0
    elif isinstance(value, (bytes, bytearray)):
        number = int.from_bytes(value, "big")
    else:
        number = int(value)
    return bool(number) if (column.bits or 1) == 1 else number


def _set_text(value: Any, column: MySqlColumn) -> str:
    """A ``SET`` value as MySQL prints it: its members in the column's declared order."""
    chosen = set(value.split(",")) if isinstance(value, str) else set(value)
    chosen.discard("")
    if column.members:
        return ",".join(member for member in column.members if member in chosen)
    return ",".join(sorted(chosen))


def _float32(value: float) -> float:
    """The shortest decimal that reads back as the same 32-bit float.

    The binlog holds a ``FLOAT`` as 4 bytes (1.1 arrives as 1.100000023841858 once widened to a
    Python float), a query returns MySQL's own shortest text: both become the same number.
    """
    if value != value or value in (float("inf"), float("-inf")):
        return value
    single = struct.pack("<f", value)
    for digits in range(6, 10):  # 9 significant digits always identify a 32-bit float
        candidate = float(f"{value:.{digits}g}")
        if struct.pack("<f", candidate) == single:
            return candidate
    return value


def _text_keys(value: Any) -> Any:
    """A decoded JSON document with byte strings (the client's keys) as text."""
    if isinstance(value, dict):
        return {_text(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_text_keys(v) for v in value]
    return _text(value)


def _text(value: Any) -> Any:
    return value.decode("utf-8") if isinstance(value, bytes) else value
