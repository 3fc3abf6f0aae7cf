"""The native snapshot renderer writes a row exactly as the stream's decoding does.

Snapshot rows (``COPY`` text, rendered natively) and streamed rows (pgoutput's values through
``parse_text_value`` and ``json_text``) must read text for text, or a mirror would see a change
where there is none. Checked here on random values of every kind of column, no server needed.
"""

from __future__ import annotations

import math

from hypothesis import example, given
from hypothesis import strategies as st

from spark_ckpt.sources.postgres._native import RowRenderer
from spark_ckpt.sources.postgres.row_text import kind_of
from spark_ckpt.sources.postgres.tables import parse_text_value
from spark_ckpt.sources.schema import json_text

COLUMNS = (
    ("id", "bigint"),
    ("n", "integer"),
    ("amount", "numeric(12,2)"),
    ("ratio", "double precision"),
    ("small", "real"),
    ("flag", "boolean"),
    ("note", "text"),
    ("tags", "text[]"),
)


def _float_text(value: float) -> str:
    """PostgreSQL's float8 output: shortest round-trip digits (extra_float_digits >= 1)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(value).removesuffix(".0")  # PostgreSQL prints 1, not 1.0


def _copy_field(text: str | None) -> str:
    """``text`` as COPY's text format writes a field."""
    if text is None:
        return "\\N"
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
rows = st.tuples(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1).map(str)),
    st.one_of(st.none(), st.decimals(allow_nan=False, places=2, max_value=10**9).map(str)),
    st.one_of(st.none(), st.floats().map(_float_text)),
    st.one_of(st.none(), st.floats(width=32).map(_float_text)),
    st.one_of(st.none(), st.sampled_from(["t", "f", "true", "false"])),
    st.one_of(st.none(), texts),
    st.one_of(st.none(), texts.map(lambda t: "{" + t + "}")),
)


@given(st.lists(rows, min_size=1, max_size=5))
# Found by this test: a float exactly halfway between two shortest decimals (Python's repr keeps
# the even last digit; Rust's shortest formatting took the upper one).
@example([("0", None, None, None, "64.35659790039062", None, None, None)])
def test_snapshot_rows_render_as_streamed_rows(batch: list[tuple[str | None, ...]]) -> None:
    names = [name for name, _ in COLUMNS]
    renderer = RowRenderer([kind_of(t) for _, t in COLUMNS], names, [0])
    data = "".join("\t".join(_copy_field(v) for v in row) + "\n" for row in batch).encode()
    # Fed in two pieces cut anywhere: a row split across COPY blocks waits for its end.
    renderer.feed(data[: len(data) // 2])
    renderer.feed(data[len(data) // 2 :])
    keys, afters = renderer.finish()
    for row, key, after in zip(batch, keys.to_pylist(), afters.to_pylist(), strict=True):
        image = {
            name: parse_text_value(type_name, text)
            for (name, type_name), text in zip(COLUMNS, row, strict=True)
        }
        assert after == json_text(image)
        assert key == json_text({"id": image["id"]})


def test_a_table_without_a_key_has_null_keys() -> None:
    renderer = RowRenderer([kind_of("text")], ["v"], [])
    renderer.feed(b"a\n\\N\n")
    keys, afters = renderer.finish()
    assert keys.to_pylist() == [None, None]
    assert afters.to_pylist() == ['{"v":"a"}', '{"v":null}']
