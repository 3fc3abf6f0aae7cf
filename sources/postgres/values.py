r"""PostgreSQL's value texts as the output's JSON values: every digit and every spelling kept.

The rules every path shares (the snapshot's rows, wal2json's and pgoutput's changes; the native
renderers in ``native/`` follow them too, checked text for text): ``numeric`` keeps the exact
text it was printed as (Debezium's ``decimal.handling.mode=string``), ``real`` / ``double
precision`` become floats (the shortest text round-trips exactly), NaN and infinities keep
PostgreSQL's spelling (JSON has no literal for them), ``bytea`` is PostgreSQL's ``\x`` hex text.
Pure Python, no database access.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

__all__ = ["NumberText", "normalize_value", "timestamp_micros"]

_NUMERIC_TYPES = ("numeric", "decimal")
_FLOATS = frozenset({"real", "double precision"})
_BARE_HEX = re.compile(r"[0-9a-f]*")
_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")


class NumberText(str):
    """A JSON number with a fraction or exponent, kept as the text it was printed as."""

    __slots__ = ()


def normalize_value(type_name: str, value: Any) -> Any:
    """A column value as PostgreSQL printed it -> a JSON value with no precision lost.

    Runs on the driver (snapshot keys and bounds), per value. Numbers with a fraction arrive as
    :class:`NumberText` (``json.loads(parse_float=...)``), so nothing is rounded before the
    column type decides.
    """
    if value is None:
        return None
    if type_name == "bytea" and isinstance(value, str) and _BARE_HEX.fullmatch(value):
        return "\\x" + value  # wal2json prints bare hex; PostgreSQL's text form has \x
    if type_name.startswith(_NUMERIC_TYPES):
        return str(value)  # every digit as printed (PostgreSQL never uses exponents for numeric)
    if isinstance(value, NumberText) or (isinstance(value, int) and type_name in _FLOATS):
        number = float(value)
        # NaN, Infinity, -Infinity have no JSON literal: keep PostgreSQL's spelling.
        return number if math.isfinite(number) else str(value)
    return value


def timestamp_micros(text: str | None) -> int | None:
    """PostgreSQL's ``timestamp with time zone`` text -> microseconds since the epoch."""
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
