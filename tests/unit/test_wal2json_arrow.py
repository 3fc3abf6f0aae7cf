"""The native wal2json decoder renders exactly what the Python reference renders, row for row."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.references.wal2json import render_change
from spark_ckpt.errors import ChangeDecodeError
from spark_ckpt.sources.postgres.decoding.wal2json_columns import decode_changes

Item = tuple[str, str, str]  # (name, type, the value as wal2json prints it)


def _item(name: str, type_name: str, printed: str) -> str:
    # wal2json escapes names and strings like json.dumps(ensure_ascii=False) does.
    return (
        f'{{"name":{json.dumps(name, ensure_ascii=False)},'
        f'"type":{json.dumps(type_name, ensure_ascii=False)},"value":{printed}}}'
    )


def row(
    action: str,
    columns: list[Item] | None,
    identity: list[Item] | None = None,
    pk: list[tuple[str, str]] | None = None,
    schema: str = "public",
    table: str = "t",
) -> str:
    """A row laid out as wal2json 2.5 prints it (format-version 2, the connector's options)."""
    text = (
        f'{{"action":"{action}","xid":731,"timestamp":"2026-11-22 04:18:39.301079+00",'
        f'"lsn":"0/44370B8","schema":{json.dumps(schema, ensure_ascii=False)},'
        f'"table":{json.dumps(table, ensure_ascii=False)}'
    )
    if columns is not None:
        text += ',"columns":[' + ",".join(_item(*item) for item in columns) + "]"
    if identity is not None:
        text += ',"identity":[' + ",".join(_item(*item) for item in identity) + "]"
    if pk is not None:
        text += (
            ',"pk":['
            + ",".join(
                f'{{"name":{json.dumps(n, ensure_ascii=False)},"type":"{t}"}}' for n, t in pk
            )
            + "]"
        )
    return text + "}"


def decoded(texts: list[str]) -> list[tuple[Any, ...]]:
    out = decode_changes(pa.array(texts, pa.string()))
    columns = [c.to_pylist() for c in (out.table, out.op, out.key, out.before, out.after)]
    return list(zip(*columns, strict=True))


ORDER_ITEMS: list[Item] = [
    ("id", "bigint", "7"),
    ("amount", "numeric(12,3)", "-0.125"),
    ("ratio", "double precision", "3"),
    ("small", "real", "1.5e-07"),
    ("zero", "double precision", "-0"),
    ("note", "text", json.dumps('q"\\\n\t\u0001]},{"name":"x"\u2028😀', ensure_ascii=False)),
    ("paid", "boolean", "true"),
    ("gone", "numeric", "null"),
    ("doc", "jsonb", json.dumps('{"k": [1, 2.50]}')),
    ("tags", "integer[]", '"{1,2}"'),
    ("at", "timestamp with time zone", '"2026-02-03 04:05:06.789012+00"'),
]


def test_inserts_updates_and_deletes_render_like_the_python_reference() -> None:
    texts = [
        row("I", ORDER_ITEMS, pk=[("id", "bigint")]),
        row("U", ORDER_ITEMS, identity=[("id", "bigint", "6")], pk=[("id", "bigint")]),
        row("U", ORDER_ITEMS, pk=[("id", "bigint")]),  # no old key: before stays null
        row("D", None, identity=[("id", "bigint", "7")], pk=[("id", "bigint")]),
        row("I", ORDER_ITEMS[:3], pk=[("amount", "numeric"), ("id", "bigint")], table="o2"),
        row("I", ORDER_ITEMS[1:4]),  # replica identity full, no primary key: key is null
        row("I", [], pk=[]),
    ]
    rendered = decoded(texts)
    assert rendered == [render_change(t) for t in texts]
    # Spot-check the shape the schema promises.
    assert rendered[0][:3] == ("public.t", "c", '{"id":7}')
    assert json.loads(rendered[0][4])["amount"] == "-0.125"
    assert '"ratio":3.0,' in rendered[0][4]
    assert '"zero":-0.0,' in rendered[0][4], "a float's sign survives, even on zero"
    assert rendered[1][3] == '{"id":6}'
    assert rendered[2][3] is None
    assert rendered[3][1:5] == ("d", '{"id":7}', '{"id":7}', None)
    assert rendered[4][2] == '{"amount":"-0.125","id":7}', "key order as listed"
    assert rendered[5][2] is None


@pytest.mark.parametrize(
    "odd",
    [
        row("I", [("ratio", "double precision", "1e+15")], pk=[("ratio", "double precision")]),
        row("I", [('we"ird', "integer", "1")], pk=[('we"ird', "integer")]),
        row("I", [("back\\slash", "integer", "1")], pk=[("back\\slash", "integer")]),
        row("I", [("id", "integer", "1")], pk=[("missing", "integer")]),
        row("I", [("id", "integer", "1")], schema='sch"ema'),
        row("I", [("id", 'my"type', '"x"')]),
        # Raw JSON values are not how wal2json prints: Python's reading of them is kept anyway.
        row("I", [("id", "json", '{"raw":[1, 2.50, -0, {"k": 1e3}], "raw": "last"}')]),
        row("I", [("id", "text", "[true, null, 12345678901234567890]")]),
        row("I", [("n", "numeric", "true"), ("f", "real", "-0"), ("i", "integer", "-0")]),
        row("I", [("f", "double precision", "1e999"), ("g", "real", "12345678901234567890")]),
        row("I", [("id", "integer", "1"), ("id", "integer", "2"), ("x", "text", '"y"')]),
        row("I", [("b", "bytea", '"00FF"'), ("c", "bytea", '""'), ("d", "bytea[]", '"ab"')]),
        row("I", [("s", "text", r'"\u00e9\/\ud83d\ude00\u2028\u007f\u001f"')]),
        row("T", None),
    ],
)
def test_odd_rows_render_like_the_python_reference(odd: str) -> None:
    plain = row("I", ORDER_ITEMS, pk=[("id", "bigint")])
    rendered = decoded([plain, odd, plain])
    assert rendered == [render_change(plain), render_change(odd), render_change(plain)]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"action":"I","schema":', "not JSON"),
        ('{"action":"B","xid":1,"schema":"s","table":"t"}', "not a row change"),
        ('{"action":"I","columns":[]}', "no schema or table"),
    ],
)
def test_a_row_that_is_no_change_is_a_typed_error_showing_it(text: str, problem: str) -> None:
    plain = row("I", ORDER_ITEMS, pk=[("id", "bigint")])
    with pytest.raises(ChangeDecodeError, match="not a row change") as info:
        decode_changes(pa.array([plain, text], pa.string()))
    assert problem in str(info.value)
    assert text[:20] in str(info.value)


# -- property: any mix of values, names and layouts renders the same on both paths ----------------

_names = st.one_of(
    st.sampled_from(["id", "a", "line", "order_id", "Ünïcode", "with space", "x,y", "{}"]),
    st.text(min_size=1, max_size=6),
)
_float_text = st.one_of(
    st.integers(-(10**17), 10**17).map(str),
    st.sampled_from(["-0", "0.1", "2.5", "1e-05", "1.5e-07", "1e+15", "1.234567e+06", "1e+30"]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr).map(lambda r: r.removesuffix(".0")),
)
_numeric_text = st.decimals(allow_nan=False, allow_infinity=False, places=6).map(str)
_values = st.one_of(
    st.tuples(st.sampled_from(["integer", "bigint", "smallint"]), st.integers().map(str)),
    st.tuples(st.sampled_from(["numeric", "numeric(20,6)"]), _numeric_text),
    st.tuples(st.sampled_from(["real", "double precision"]), _float_text),
    st.tuples(st.just("boolean"), st.sampled_from(["true", "false"])),
    st.tuples(
        st.sampled_from(["text", "character varying(20)", "jsonb", "integer[]", "bytea"]),
        st.text().map(lambda s: json.dumps(s, ensure_ascii=False)),
    ),
    st.tuples(st.sampled_from(["text", "numeric", "double precision"]), st.just("null")),
)
_items = st.lists(
    st.tuples(_names, _values).map(lambda t: (t[0], t[1][0], t[1][1])),
    max_size=6,
    unique_by=lambda item: item[0],
)


@st.composite
def _rows(draw: st.DrawFn) -> str:
    action = draw(st.sampled_from("IUD"))
    columns = draw(_items)
    names = [name for name, _, _ in columns]
    pk_names = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    if draw(st.booleans()) and pk_names:
        pk_names.append("not_a_column")
    pk = [(n, "integer") for n in pk_names] if pk_names or draw(st.booleans()) else None
    identity = [c for c in columns if c[0] in pk_names] if action != "I" else None
    if action == "U" and draw(st.booleans()):
        identity = None
    return row(action, None if action == "D" else columns, identity, pk, table=draw(_names))


@given(st.lists(_rows(), min_size=1, max_size=8))
def test_any_rows_render_exactly_as_the_render_change(texts: list[str]) -> None:
    assert decoded(texts) == [render_change(t) for t in texts]
