"""The reference wal2json decoder: Python's ``json`` module and the value rules, one row at a time.

The connector decodes wal2json's row changes with one production decoder, the native one
(``spark_ckpt.sources.postgres.decoding.wal2json_columns``). This is the independent reading
of the same format (wal2json's README, "format-version 2") that it is tested against, text for
text: it parses with ``json.loads`` (numbers kept as their text) and applies
``spark_ckpt.sources.postgres.values.normalize_value``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from spark_ckpt.errors import ChangeDecodeError
from spark_ckpt.sources.postgres.values import NumberText, normalize_value
from spark_ckpt.sources.schema import json_text

__all__ = ["PgChange", "decode_change", "render_change"]

_OPS = {"I": "c", "U": "u", "D": "d"}


@dataclass(frozen=True)
class PgChange:
    """One row change: ``op`` in ``c``, ``u``, ``d``, ``t`` (truncate)."""

    op: str
    table: str
    key: dict[str, Any] | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def _constant(name: str) -> str:
    return name  # NaN, Infinity, -Infinity: no JSON literal; keep PostgreSQL's spelling


def _integer(text: str) -> int | NumberText:
    # A float column's -0 is printed "-0", which int() would turn into 0: keep the sign.
    return NumberText(text) if text == "-0" else int(text)


def _columns(items: Iterable[dict[str, Any]] | None) -> dict[str, Any] | None:
    if items is None:
        return None
    return {
        item["name"]: normalize_value(item.get("type", ""), item.get("value")) for item in items
    }


def decode_change(data: str) -> PgChange:
    """One ``I`` / ``U`` / ``D`` / ``T`` row's data -> the change, values normalised."""
    try:
        body = json.loads(
            data, parse_float=NumberText, parse_int=_integer, parse_constant=_constant
        )
        action = body["action"]
    except (ValueError, KeyError, TypeError) as e:
        raise ChangeDecodeError(f"a wal2json row that is not a row change: {data[:200]!r}") from e
    table = f"{body['schema']}.{body['table']}"
    if action == "T":
        return PgChange("t", table, None, None, None)
    after = _columns(body.get("columns")) if action != "D" else None
    before = _columns(body.get("identity")) if action != "I" else None
    pk_names = [item["name"] for item in body.get("pk") or []]
    image = after if after is not None else before
    key = None
    if pk_names and image is not None:
        key = {name: image.get(name) for name in pk_names}
    return PgChange(_OPS[action], table, key, before, after)


def render_change(text: str) -> tuple[str, str, str | None, str | None, str | None]:
    """One row as the output's text: ``(table, op, key, before, after)``."""
    change = decode_change(text)
    return (
        change.table,
        change.op,
        json_text(change.key),
        json_text(change.before),
        json_text(change.after),
    )
