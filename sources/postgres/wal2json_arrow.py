r"""Vectorised decoding of wal2json row changes: Arrow compute (RE2) instead of a Python loop.

:func:`decode_changes` turns a column of wal2json ``format-version 2`` ``I`` / ``U`` / ``D`` rows
into the ``table``, ``op``, ``key``, ``before`` and ``after`` columns of the output schema. It is
the fast path of :func:`.wal2json.decode_change` and renders **exactly the same
text**: a value wal2json printed is copied, not parsed and printed again, wherever the copy is what
:func:`~spark_ckpt.sources.postgres.wal2json.normalize_value` followed by ``json.dumps`` would give:

- strings, integers, booleans and nulls: wal2json escapes strings like ``json.dumps`` does
  (``\"``, ``\\``, ``\n`` ..., other control characters as ``\u00XX``), so they are copied;
- ``numeric``: the bare number is quoted, every digit kept;
- ``real`` / ``double precision``: integral values (up to 15 digits) get ``.0`` (Python's
  float spelling); fractions and negative exponents are copied (both print the shortest exact
  digits); PostgreSQL and Python place positive exponents differently (``1e+15`` vs
  ``1000000000000000.0``), so those rows take the Python path.

Rows the patterns do not cover (an item left unrendered, names that need escaping, a key column
missing from the image, an unexpected layout) are decoded by the Python path, so the output never
depends on which path a row took. Runs on executors, per partition chunk; no Python per row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import json_text
from .types import types_json
from .wal2json import decode_change

__all__ = ["ChangeColumns", "decode_changes", "decode_column_types", "render_change"]

_STRING = r'"(?:[^"\\]|\\.)*"'  # a JSON string as printed, escapes included
_NAME = r'("[^"\\]*")'  # a column name that needs no escaping, quotes included
_FLOAT = r'"(?:real|double precision)"'

# Pass 1: integral floats get Python's ".0" (wal2json prints 3 for 3.0). PostgreSQL prints
# integral floats without an exponent only below 1e15, where every integer is exact in a double.
_FLOAT_INTEGRAL = (
    rf'\{{"name":{_NAME},"type":{_FLOAT},"value":(-?[0-9]{{1,15}})\}}',
    r"\1:\2.0",
)
# Pass 2: every other item Python would print the same way (leftmost-first alternation). Bare
# numbers are accepted only under the types wal2json prints them for: numeric types get their
# number quoted (\2 captures the type's closing quote); floats with a fraction or a negative
# exponent and integer types are copied; any type may hold a string, a boolean or null.
_ITEM = (
    rf'\{{"name":{_NAME},"type":(?:"(?:numeric|decimal)[^"\\]*(")'
    rf',"value":(-?[0-9][0-9.]*)'
    rf'|{_FLOAT},"value":(-?[0-9]+(?:\.[0-9]+(?:e-[0-9]+)?|e-[0-9]+))'
    rf'|"(?:smallint|integer|bigint|oid)","value":(-?[0-9]+)'
    rf'|"[^"\\]*","value":({_STRING}|true|false|null))\}}',
    r"\1:\2\3\2\4\5\6",
)
# Pass 0: bytea values get the \x prefix of PostgreSQL's text form (wal2json prints bare hex;
# the snapshot reads bytea::text), so both render the same.
_BYTEA = (
    rf'\{{"name":{_NAME},"type":"bytea","value":"([0-9a-f]*)"\}}',
    r'{"name":\1,"type":"bytea","value":"\\\\x\2"}',
)
# After both passes: the row's parts (the column lists are "name":value pairs now).
_ROW = (
    r'^\{"action":"(?P<action>[IUD])",.*?"schema":"(?P<schema>[^"\\]*)",'
    r'"table":"(?P<table>[^"\\]*)"(?P<columns>,"columns":\[.*?\])?'
    r'(?P<identity>,"identity":\[.*?\])?(?P<pk>,"pk":\[.*?\])?\}$'
)
_UNRENDERED = '","value":'  # an item neither pass rendered (only structural quotes are bare)
_COLUMNS_PREFIX = len(',"columns":[')
_IDENTITY_PREFIX = len(',"identity":[')
_PK_PREFIX = len(',"pk":[')


@dataclass(frozen=True)
class ChangeColumns:
    """Output columns of a run of row changes, aligned with the input.

    Attributes
    ----------
    table, op, key, before, after
        String arrays as in the output schema.
    fallback_rows
        How many rows took the Python path.
    """

    table: pa.Array
    op: pa.Array
    key: pa.Array
    before: pa.Array
    after: pa.Array
    fallback_rows: int


def _object(part: pa.Array, prefix: int) -> pa.Array:
    """``,"columns":[pairs]`` -> ``{pairs}``; an absent part (``""``) -> null."""
    pairs = pc.utf8_slice_codeunits(part, prefix, -1)
    rendered = pc.binary_join_element_wise("{", pairs, "}", "")
    return pc.if_else(pc.equal(part, ""), pa.scalar(None, pa.string()), rendered)


def _keys(image: pa.Array, pk: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The ``key`` column and a mask of rows whose key could not be cut from the image.

    Rows are grouped by their primary key (about one group per table); each key column's value is
    cut from the group's rendered images, where ``,"name":`` can only be a key (quotes inside
    strings are escaped). Rows without a primary key keep a null key, as in the Python path.
    """
    failed = np.zeros(len(image), dtype=bool)
    pieces: list[pa.Array] = [pa.nulls(1, pa.string())]  # index 0: the null key
    where = np.zeros(len(image), dtype=np.int64)
    taken = 1
    for spec in pc.unique(pk).to_pylist():
        if not spec:
            continue
        names = [item["name"] for item in json.loads("[" + spec[_PK_PREFIX:-1] + "]")]
        if not names:
            continue
        rows = pc.indices_nonzero(pc.equal(pk, spec)).to_numpy()
        if any("\\" in name or '"' in name for name in names):
            failed[rows] = True  # such names are escaped in the image: the Python path
            continue
        images = image.take(rows)
        parts: list[pa.Array | str] = []
        for i, name in enumerate(names):
            # struct_field, not .field(): a row without a match must give null, not "".
            found = pc.struct_field(
                pc.extract_regex(images, rf'[{{,]"\Q{name}\E":(?P<v>{_STRING}|[^,}}]+)'), "v"
            )
            failed[rows[pc.is_null(found).to_numpy(zero_copy_only=False)]] = True
            parts += ["," if i else "{", json.dumps(name, ensure_ascii=False) + ":", found]
        pieces.append(pc.binary_join_element_wise(*parts, "}", ""))
        where[rows] = np.arange(taken, taken + len(rows))
        taken += len(rows)
    return pa.concat_arrays(pieces).take(where), failed


def decode_changes(texts: pa.Array) -> ChangeColumns:
    """Decode wal2json ``I`` / ``U`` / ``D`` / ``T`` rows (a string array) into output columns.

    Runs on executors, per chunk; truncates (rare) take the Python path.

    Equivalent to calling :func:`.wal2json.decode_change` on every row and
    rendering ``key`` / ``before`` / ``after`` with
    :func:`~spark_ckpt.sources.schema.json_text`, text for text.

    Raises
    ------
    spark_ckpt.errors.ChangeDecodeError
        As :func:`.wal2json.decode_change`, for a row the fast path declines
        and the Python path cannot read.
    """
    rendered = pc.replace_substring_regex(texts, *_BYTEA)
    rendered = pc.replace_substring_regex(rendered, *_FLOAT_INTEGRAL)
    rendered = pc.replace_substring_regex(rendered, *_ITEM)
    parts = pc.extract_regex(rendered, _ROW)
    action = parts.field("action")
    after = _object(parts.field("columns"), _COLUMNS_PREFIX)
    before = _object(parts.field("identity"), _IDENTITY_PREFIX)
    is_insert, is_delete = pc.equal(action, "I"), pc.equal(action, "D")
    null = pa.scalar(None, pa.string())
    after = pc.if_else(is_delete, null, after)
    before = pc.if_else(is_insert, null, before)
    key, key_failed = _keys(pc.coalesce(after, before), parts.field("pk"))
    table = pc.binary_join_element_wise(parts.field("schema"), parts.field("table"), ".")
    op = pc.utf8_lower(pc.replace_substring(action, "I", "c"))
    declined = pc.or_(pc.is_null(parts), pc.match_substring(rendered, _UNRENDERED))
    declined = pc.fill_null(declined, True).to_numpy(zero_copy_only=False) | key_failed
    columns = [table, op, key, before, after]
    fallback = np.flatnonzero(declined).tolist()
    if fallback:
        columns = _patched(columns, texts, fallback)
    table, op, key, before, after = columns
    return ChangeColumns(table, op, key, before, after, fallback_rows=len(fallback))


def render_change(text: str) -> tuple[str, str, str | None, str | None, str | None]:
    """The Python path for one row: ``(table, op, key, before, after)`` as output text.

    :func:`decode_changes` gives exactly this for every row; it is also its fallback.
    """
    change = decode_change(text)
    return (
        change.table,
        change.op,
        json_text(change.key),
        json_text(change.before),
        json_text(change.after),
    )


def _patched(columns: list[pa.Array], texts: pa.Array, rows: list[int]) -> list[pa.Array]:
    """Replace ``rows`` of the columns by the Python path's decoding of the same texts."""
    values = [column.to_pylist() for column in columns]
    for row in rows:
        for column, value in zip(values, render_change(texts[row].as_py()), strict=True):
            column[row] = value
    return [pa.array(column, pa.string()) for column in values]


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
