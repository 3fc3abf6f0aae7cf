"""MySQL's and MariaDB's column values, as the binlog client decodes them, as JSON values.

The rules: integers (signed and unsigned, a ``BIGINT UNSIGNED`` above 2^63 included) stay exact
JSON numbers; ``DECIMAL`` keeps every digit as text (Debezium's ``decimal.handling.mode=string``);
``FLOAT``/``DOUBLE`` are JSON numbers; ``DATE``, ``DATETIME`` and ``TIMESTAMP`` are ISO-8601 text
(``TIMESTAMP`` in UTC, as the binlog holds it); ``TIME`` is ``[-]HH:MM:SS[.ffffff]``; binary
strings are base64 (Debezium's ``binary.handling.mode=bytes`` in JSON); ``SET`` is its members
joined by commas; ``JSON`` is its text. Pure Python; runs on the driver, per value.
"""

from __future__ import annotations

import base64
import json
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

__all__ = ["json_value", "row_values"]


def json_value(value: Any) -> Any:
    """One column value -> a JSON value with nothing rounded."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return _time_text(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset)):
        return ",".join(sorted(str(member) for member in value))
    if isinstance(value, (dict, list)):
        return json.dumps(_text_keys(value), separators=(",", ":"), ensure_ascii=False)
    return str(value)


def row_values(row: dict[str, Any]) -> dict[str, Any]:
    """A decoded row image -> its JSON values, column by column."""
    return {name: json_value(value) for name, value in row.items()}


def _time_text(value: timedelta) -> str:
    """A ``TIME`` value as MySQL prints it (it may be negative and exceed 24 hours)."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{text}.{fraction:06d}" if fraction else text


def _text_keys(value: Any) -> Any:
    """A decoded JSON document with byte strings (the client's keys) as text."""
    if isinstance(value, dict):
        return {_text(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_text_keys(v) for v in value]
    return _text(value)


def _text(value: Any) -> Any:
    return value.decode("utf-8") if isinstance(value, bytes) else value
