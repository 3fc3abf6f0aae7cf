"""wal2json's row changes decoded column-wise: a string array in, the output's columns out.

:func:`decode_changes` turns a column of wal2json ``format-version 2`` ``I`` / ``U`` / ``D`` /
``T`` rows into the ``table``, ``op``, ``key``, ``before`` and ``after`` columns of the output
schema, in the connector's native module (``sources/postgres/native``, the value rules of
:mod:`..values` and the snapshot's renderer). It is the one production wal2json decoder; the
tests keep a Python decoder (``harness.references.wal2json``) as the reference it is checked
against, text for text. :func:`decode_column_types` gives the ``column_types`` column. Runs on
executors, per chunk, and on the driver for an incremental snapshot's windows.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._native import decode_wal2json
from ..types import types_json
from .transactions import ChangeColumns

__all__ = ["decode_changes", "decode_column_types"]


def decode_changes(texts: pa.Array) -> ChangeColumns:
    """Decode wal2json ``I`` / ``U`` / ``D`` / ``T`` rows (a string array) into output columns.

    Runs on executors, per chunk, without the GIL (and on the driver for a snapshot window).

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
