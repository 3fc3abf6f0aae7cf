"""Decoding wal2json row changes column-wise: a string array in, the output's columns out.

:func:`decode_changes` turns a column of wal2json ``format-version 2`` ``I`` / ``U`` / ``D`` /
``T`` rows into the ``table``, ``op``, ``key``, ``before`` and ``after`` columns of the output
schema, in the connector's native module (``sources/postgres/native``, the same value rules as
the snapshot's renderer). :func:`.wal2json.decode_change` followed by ``json.dumps``
(:func:`render_change`) is the reference it is tested against, text for text.
:func:`decode_column_types` gives the ``column_types`` column. Runs on executors, per chunk.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import json_text
from ._native import decode_wal2json
from .types import types_json
from .wal2json import decode_change

__all__ = ["ChangeColumns", "decode_changes", "decode_column_types", "render_change"]


@dataclass(frozen=True)
class ChangeColumns:
    """Output columns of a run of row changes, aligned with the input.

    Attributes
    ----------
    table, op, key, before, after
        String arrays as in the output schema.
    """

    table: pa.Array
    op: pa.Array
    key: pa.Array
    before: pa.Array
    after: pa.Array


def decode_changes(texts: pa.Array) -> ChangeColumns:
    """Decode wal2json ``I`` / ``U`` / ``D`` / ``T`` rows (a string array) into output columns.

    Runs on executors, per chunk, without the GIL. Equivalent to :func:`render_change` on every
    row, text for text.

    Raises
    ------
    spark_ckpt.errors.ChangeDecodeError
        For the first row that is not a row change (the message shows it).
    """
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if texts.type != pa.string():
        texts = texts.cast(pa.string())
    table, op, key, before, after = decode_wal2json(texts)
    return ChangeColumns(table, op, key, before, after)


def render_change(text: str) -> tuple[str, str, str | None, str | None, str | None]:
    """The reference for one row: ``(table, op, key, before, after)`` as output text.

    :func:`decode_changes` gives exactly this for every row.
    """
    change = decode_change(text)
    return (
        change.table,
        change.op,
        json_text(change.key),
        json_text(change.before),
        json_text(change.after),
    )


# Each item -> "name":"type" (the value dropped: a JSON string, or a bare number/literal).
_TYPE_ITEM = (
    r'\{"name":("[^"\\]*"),"type":("[^"\\]*"),"value":(?:"(?:[^"\\]|\\.)*"|[^,}\]]*)\}',
    r"\1:\2",
)
_TYPE_ROW = (
    r'^\{"action":"[IUD]",.*?"table":"[^"\\]*"(?:,"columns":\[(?P<columns>.*?)\])?'
    r'(?:,"identity":\[(?P<identity>.*?)\])?(?:,"pk":\[.*?\])?\}$'
)


def _types_of_row(text: str) -> str:
    """The Python path: ``column_types`` of one wal2json row."""
    body = json.loads(text)
    items = body.get("columns") or body.get("identity") or []
    return types_json((item["name"], item.get("type", "")) for item in items)


def decode_column_types(texts: pa.Array) -> pa.Array:
    """The ``column_types`` column of wal2json ``I`` / ``U`` / ``D`` rows (executor, per chunk).

    The types of the row's ``columns`` (its ``identity`` for a delete), mapped by
    :func:`.types.spark_type`. Rows share a handful of distinct column lists, so the mapping
    runs once per distinct list; rows the patterns do not cover take the Python path.
    """
    rendered = pc.replace_substring_regex(texts, *_TYPE_ITEM)
    parts = pc.extract_regex(rendered, _TYPE_ROW)
    pairs = pc.if_else(
        pc.equal(parts.field("columns"), ""), parts.field("identity"), parts.field("columns")
    )
    declined = pc.or_(pc.is_null(parts), pc.match_substring(rendered, '"value":'))
    declined = pc.fill_null(declined, True)
    encoded = pc.dictionary_encode(pc.fill_null(pairs, ""))
    mapped = []
    for listed in encoded.dictionary.to_pylist():
        try:
            raw = json.loads("{" + listed + "}")
        except ValueError:
            raw = None
        mapped.append(None if raw is None else types_json(raw.items()))
    types = pa.array(mapped, pa.string()).take(encoded.indices)
    rows = np.flatnonzero(
        pc.or_(declined, pc.is_null(types)).to_numpy(zero_copy_only=False)
    ).tolist()
    if rows:
        values = types.to_pylist()
        for row in rows:
            values[row] = _types_of_row(texts[row].as_py())
        types = pa.array(values, pa.string())
    return types
