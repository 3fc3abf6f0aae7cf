r"""Column types of mirror tables: Spark SQL type names, their Arrow types, and value conversion.

A mirror's column types come from the change stream: a ``column_types`` column (JSON object of
column name to Spark SQL type name, e.g. ``{"id": "bigint", "total": "decimal(12,2)"}``), which a
connector that knows its source's types emits, or else :func:`infer_type` on the JSON values
(documented in docs/mirror.md: integers -> ``bigint``, fractions -> ``double``, booleans, strings,
anything else as JSON text in a ``string`` column).

Values arrive as JSON values in the ``after`` / ``before`` images, in the text forms the
connectors document: PostgreSQL's output text for timestamps, dates, ``bytea`` (``\\x`` hex) and
arrays (``{1,2,NULL}``), decimals as strings with every digit. :func:`to_arrow` converts a column
of them without losing precision, or raises :class:`~spark_ckpt.errors.MirrorChangeError`
naming the table, column and value. Pure: no Spark; runs on the driver in the pre-commit.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from spark_ckpt.errors import MirrorChangeError

__all__ = [
    "arrow_type",
    "canonical_type",
    "infer_type",
    "parse_pg_array",
    "to_arrow",
    "widen",
]

_SIMPLE: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_ARRAY = re.compile(r"^array<(.+)>$")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_DATE = dt.date(1970, 1, 1)


_CANONICAL = {"byte": "tinyint", "short": "smallint", "integer": "int", "long": "bigint"}
_CANONICAL |= {"real": "float"}


def canonical_type(name: str) -> str:
    """A type name as Spark SQL spells it: Delta's ``long`` is ``bigint``.

    Types from the stream and from a Delta schema then compare equal (``array<integer>`` and
    ``array<int>``).
    """
    text = name.strip().lower()
    array = _ARRAY.match(text)
    if array:
        return f"array<{canonical_type(array.group(1))}>"
    decimal = _DECIMAL.match(text)
    if decimal:
        return f"decimal({decimal.group(1)},{decimal.group(2)})"
    return _CANONICAL.get(text, text)


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type of a Spark SQL type name (``decimal(12,2)``, ``array<int>`` ...).

    Raises
    ------
    MirrorChangeError
        For a name outside the supported set (listed in the message).
    """
    text = name.strip().lower()
    if text in _SIMPLE:
        return _SIMPLE[text]
    decimal = _DECIMAL.match(text)
    if decimal:
        precision, scale = int(decimal.group(1)), int(decimal.group(2))
        if not 0 < precision <= 38 or scale > precision:
            raise MirrorChangeError(
                f"column type {name!r}: Delta decimals have a precision of 1..38 and a scale "
                f"no larger than it"
            )
        return pa.decimal128(precision, scale)
    array = _ARRAY.match(text)
    if array:
        return pa.list_(arrow_type(array.group(1)))
    raise MirrorChangeError(
        f"column type {name!r} is not one a mirror can hold; use one of "
        f"{', '.join(sorted(_SIMPLE))}, decimal(p,s) or array<type>"
    )


def infer_type(value: Any) -> str | None:
    """The Spark SQL type a JSON value implies when the stream carries no types (None: null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    return "string"  # strings, and objects or arrays kept as their JSON text


def widen(current: str | None, seen: str | None) -> str | None:
    """Combine two inferred types of one column: ``bigint`` and ``double`` give ``double``."""
    if current is None or current == seen:
        return seen if current is None else current
    if seen is None:
        return current
    if {current, seen} == {"bigint", "double"}:
        return "double"
    return "string"


def parse_pg_array(text: str) -> list[str | None]:
    """A one-dimensional PostgreSQL array literal (``{1,"a b",NULL}``) -> its element texts.

    Raises
    ------
    ValueError
        For text that is not such a literal (multi-dimensional arrays included).
    """
    if not (text.startswith("{") and text.endswith("}")):
        raise ValueError("not an array literal")
    body = text[1:-1]
    items: list[str | None] = []
    if not body:
        return items
    i, n = 0, len(body)
    while i <= n:
        if i < n and body[i] == '"':
            i += 1
            chars = []
            while i < n and body[i] != '"':
                if body[i] == "\\" and i + 1 < n:
                    i += 1
                chars.append(body[i])
                i += 1
            items.append("".join(chars))
            i += 1  # the closing quote
        else:
            end = body.find(",", i)
            end = n if end < 0 else end
            word = body[i:end].strip()
            if word.startswith("{"):
                raise ValueError("multi-dimensional arrays are not supported")
            items.append(None if word.upper() == "NULL" else word)
            i = end
        if i < n and body[i] != ",":
            raise ValueError("unexpected text after an element")
        i += 1
    return items


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("t", "true", "f", "false"):
        return value.lower() in ("t", "true")
    raise ValueError("not a boolean")


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError("not an integer")


def _floating(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return float(value)  # NaN, Infinity, -Infinity as PostgreSQL spells them
    raise ValueError("not a number")


def _decimal(scale: int) -> Callable[[Any], Decimal]:
    quantum = Decimal(1).scaleb(-scale)

    def convert(value: Any) -> Decimal:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError("not a number")
        try:
            number = Decimal(str(value))
        except InvalidOperation as e:
            raise ValueError("not a number") from e
        if not number.is_finite():
            raise ValueError("a decimal column cannot hold NaN or infinity")
        exact = number.quantize(quantum)
        if exact != number:
            raise ValueError(f"has more than {scale} digits after the point")
        return exact

    return convert


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _binary(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError("not text")
    if value.startswith("\\x"):
        return bytes.fromhex(value[2:])  # PostgreSQL's bytea output (hex)
    try:
        return base64.b64decode(value, validate=True)  # Debezium's bytes
    except binascii.Error as e:
        raise ValueError("neither \\x hex nor base64") from e


def _date(value: Any) -> dt.date:
    if isinstance(value, int) and not isinstance(value, bool):
        return _EPOCH_DATE + dt.timedelta(days=value)  # days since the epoch
    if isinstance(value, str):
        return dt.date.fromisoformat(value)
    raise ValueError("not a date")


def _timestamp(zoned: bool) -> Callable[[Any], dt.datetime]:
    def convert(value: Any) -> dt.datetime:
        if isinstance(value, dt.datetime):  # a commit time (SCD type 2's validity columns)
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            moment = _EPOCH + dt.timedelta(microseconds=value)  # microseconds since the epoch
            return moment if zoned else moment.replace(tzinfo=None)
        if not isinstance(value, str):
            raise ValueError("not a timestamp")
        moment = dt.datetime.fromisoformat(value)
        if zoned:
            if moment.tzinfo is None:
                raise ValueError("a timestamp with time zone without its offset")
            return moment.astimezone(dt.timezone.utc)
        if moment.tzinfo is not None:
            raise ValueError("a timestamp without time zone that has an offset")
        return moment

    return convert


def _converter(kind: pa.DataType) -> Callable[[Any], Any]:
    if pa.types.is_boolean(kind):
        return _boolean
    if pa.types.is_integer(kind):
        return _integer
    if pa.types.is_floating(kind):
        return _floating
    if pa.types.is_decimal(kind):
        return _decimal(kind.scale)
    if pa.types.is_string(kind):
        return _text
    if pa.types.is_binary(kind):
        return _binary
    if pa.types.is_date(kind):
        return _date
    if pa.types.is_timestamp(kind):
        return _timestamp(kind.tz is not None)
    if pa.types.is_list(kind):
        element = _converter(kind.value_type)

        def convert(value: Any) -> list[Any]:
            items = parse_pg_array(value) if isinstance(value, str) else value
            if not isinstance(items, list):
                raise ValueError("not an array")
            return [None if item is None else element(item) for item in items]

        return convert
    raise MirrorChangeError(f"no conversion into {kind}")


def to_arrow(values: Sequence[Any], kind: pa.DataType, table: str, column: str) -> pa.Array:
    """Convert one column's JSON values into an Arrow array of ``kind`` (driver, per batch).

    Raises
    ------
    MirrorChangeError
        For a value that does not fit (names the table, the column, the type and the value).
    """
    convert = _converter(kind)
    out: list[Any] = []
    for value in values:
        if value is None:
            out.append(None)
            continue
        try:
            converted = convert(value)
        except (ValueError, TypeError, OverflowError) as e:
            raise MirrorChangeError(
                f"table {table}, column {column!r}: the value {str(value)[:80]!r} does not fit "
                f"the column's type {kind} ({e}). Nothing of the batch is published; fix the "
                f"column's type at the source (or its column_types), then restart the query"
            ) from e
        out.append(converted)
    try:
        return pa.array(out, type=kind)
    except (pa.ArrowInvalid, OverflowError) as e:
        raise MirrorChangeError(
            f"table {table}, column {column!r}: a value does not fit the type {kind}: {e}"
        ) from e
