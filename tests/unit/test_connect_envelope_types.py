"""Column types from Kafka Connect JSON envelopes (``columnTypes=true``), through the reader."""

from __future__ import annotations

import base64
import json
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_ckpt.errors import ChangeDecodeError, MirrorChangeError
from spark_ckpt.sinks.mirror.fold import fold_changes
from spark_ckpt.sinks.mirror.types import arrow_type
from spark_ckpt.sources.debezium_format.types import PLACEHOLDER, ImageTypes, _rewritten
from spark_ckpt.testing.debezium_log import write_log

from driver_loop import make_reader, run

_FIELDS = [
    {"type": "int64", "optional": False, "field": "id"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "12"},
        "field": "total",
    },
    {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "field": "at"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "field": "day"},
    {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "field": "zoned"},
    {"type": "array", "items": {"type": "string"}, "field": "tags"},
    {"type": "struct", "fields": [], "field": "nested"},
]


def _envelope(after: dict[str, Any]) -> dict[str, Any]:
    schema = {
        "type": "struct",
        "fields": [
            {"type": "struct", "fields": _FIELDS, "optional": True, "field": "before"},
            {"type": "struct", "fields": _FIELDS, "optional": True, "field": "after"},
            {"type": "struct", "fields": [], "field": "source"},
        ],
    }
    payload = {
        "op": "c",
        "before": None,
        "after": after,
        "key": {"id": after["id"]},
        "source": {"name": "env", "schema": "public", "table": "t", "ts_ms": 1},
        "ts_ms": 2,
    }
    return {"schema": schema, "payload": payload}


def test_envelope_types_and_values_reach_a_typed_mirror() -> None:
    unscaled = (-123456).to_bytes(3, "big", signed=True)
    after = {
        "id": 7,
        "total": base64.b64encode(unscaled).decode(),
        "at": 1_767_225_600_123,  # milliseconds
        "day": 20_454,
        "zoned": "2026-01-01T00:00:00.5Z",
        "tags": ["a", None],
        "nested": {"k": 1},
    }
    with tempfile.TemporaryDirectory() as directory:
        write_log(
            directory,
            [
                _envelope(after),
                {
                    "op": "c",
                    "after": {"id": 8},
                    "key": {"id": 8},
                    "source": {"schema": "public", "table": "t"},
                },
            ],
            [],
        )
        options = {"connector": "debezium-json", "path": directory, "columnTypes": "true"}
        batches, _ = run(make_reader(options), options)
    rows = [row for batch in batches for row in batch.rows]
    typed, plain = rows
    assert json.loads(typed["column_types"]) == {
        "id": "bigint",
        "total": "decimal(12,2)",
        "at": "timestamp_ntz",
        "day": "date",
        "zoned": "timestamp",
        "tags": "array<string>",
        "nested": "string",
    }
    image = json.loads(typed["after"])
    assert image["total"] == "-1234.56"
    assert image["at"] == 1_767_225_600_123_000  # microseconds now
    assert plain["column_types"] is None  # a line without an envelope: types inferred
    changes = pa.Table.from_pylist([typed])
    folded = fold_changes(changes)["public.t"]
    types = folded.column_types()
    schema = pa.schema([pa.field(n, arrow_type(t)) for n, t in types.items()])
    [row] = folded.to_arrow(schema).to_pylist()
    assert row["total"] == Decimal("-1234.56")
    assert row["at"].isoformat() == "2026-01-01T00:00:00.123000"
    assert row["day"].isoformat() == "2026-01-01"
    assert row["zoned"].isoformat() == "2026-01-01T00:00:00.500000+00:00"
    assert row["tags"] == ["a", None]
    assert row["nested"] == '{"k":1}'


# -- logs Debezium 3.6.1 wrote (tests/fixtures/debezium/types-postgres-3.6.1-*) --------------------
#
# Recorded by tests/integration/test_debezium_types.py (run as a script); each folder's STEPS.txt
# holds the tables, the statements and the writer's properties. Row 1 is the snapshot's full row,
# row 3 the streamed row of edge values; row 1 is then updated twice leaving its TOASTed columns
# (big_*) unchanged, so Debezium writes its unavailable-value placeholder for them.

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
MODES = (
    "adaptive-precise-bytes",
    "connect-string-base64",
    "adaptive-double-hex",
    "isostring-precise-bytes",
)
TOASTED = ("big_text", "big_bytes", "big_ints", "big_texts", "big_uuids", "big_json")


def fixture_rows(mode: str) -> list[dict[str, Any]]:
    """Every change row of one fixture log, read with columnTypes=true and keyColumns."""
    options = {
        "connector": "debezium-json",
        "path": str(FIXTURES / f"types-postgres-3.6.1-{mode}"),
        "columnTypes": "true",
        "keyColumns": "public.typed:id;public.special:id",
    }
    batches, _ = run(make_reader(options), options)
    return [row for batch in batches for row in batch.rows]


def image(rows: list[dict[str, Any]], table: str, op: str, key: int, nth: int = 0) -> Any:
    """The after image of the ``nth`` change ``op`` of ``key`` in ``table``."""
    found = [
        json.loads(r["after"])
        for r in rows
        if r["table"] == table and r["op"] == op and json.loads(r["key"]) == {"id": key}
    ]
    return found[nth]


_PRECISE_TYPES = {
    "id": "int",
    "n_fixed": "decimal(12,3)",
    "n_free": "string",  # VariableScaleDecimal: no fixed scale
    "n_wide": "string",  # precision 40 > 38
    "d": "date",
    "t0": "string",
    "t3": "string",
    "t6": "string",
    "ttz": "string",
    "ts3": "timestamp_ntz",
    "ts6": "timestamp_ntz",
    "tstz": "timestamp",
    "iv": "bigint",  # MicroDuration
    "j": "string",
    "jb": "string",
    "u": "string",
    "m": "string",
    "ints": "array<int>",
    "texts": "array<string>",
    "b": "binary",
    "big_text": "string",
    "big_bytes": "binary",
    "big_ints": "array<int>",
    "big_texts": "array<string>",
    "big_uuids": "array<string>",
    "big_json": "string",
}
_TYPES = {
    "adaptive-precise-bytes": _PRECISE_TYPES,
    # string decimals and base64 bytes are plain strings in the schema; Connect's Timestamp is
    # a wall clock without zone
    "connect-string-base64": {
        **_PRECISE_TYPES,
        **dict.fromkeys(("n_fixed", "b", "big_bytes"), "string"),
    },
    "adaptive-double-hex": {
        **_PRECISE_TYPES,
        **dict.fromkeys(("n_fixed", "n_free", "n_wide"), "double"),
        **dict.fromkeys(("b", "big_bytes"), "string"),
    },
    "isostring-precise-bytes": {**_PRECISE_TYPES, "iv": "string"},  # interval.handling.mode=string
}


@pytest.mark.parametrize("mode", MODES)
def test_each_mode_types_the_columns_as_its_envelope_says(mode: str) -> None:
    """column_types of a real log: one Spark SQL type per column, by the mode's schemas."""
    rows = [r for r in fixture_rows(mode) if r["table"] == "public.typed"]
    assert {r["column_types"] for r in rows} == {json.dumps(_TYPES[mode], separators=(",", ":"))}


@pytest.mark.parametrize(
    ("mode", "key", "column", "expected"),
    [
        # numeric(12,3): Decimal's base64 becomes its digits at the column's scale
        ("adaptive-precise-bytes", 1, "n_fixed", "1234.500"),
        ("adaptive-precise-bytes", 3, "n_fixed", "-0.001"),
        # numeric: VariableScaleDecimal; Debezium dropped 12.3400's trailing zeros itself
        ("adaptive-precise-bytes", 1, "n_free", "12.34"),
        # numeric(40,5): more digits than Python's default 28-digit context, every one kept
        ("adaptive-precise-bytes", 1, "n_wide", "123456789012345678901234567890123.45678"),
        ("adaptive-precise-bytes", 3, "n_wide", "-1.00000"),
        ("connect-string-base64", 1, "n_free", "12.3400"),  # string mode: as PostgreSQL has it
        ("adaptive-double-hex", 1, "n_wide", 1.2345678901234569e32),  # double: as written
        # times of day as PostgreSQL prints them, from ms (time(0..3)) and µs (time(4..6))
        ("adaptive-precise-bytes", 1, "t0", "10:15:30"),
        ("adaptive-precise-bytes", 1, "t3", "10:15:30.123"),
        ("adaptive-precise-bytes", 1, "t6", "10:15:30.123456"),
        ("adaptive-precise-bytes", 3, "t6", "24:00:00"),
        ("connect-string-base64", 1, "t6", "10:15:30.123"),  # Connect's Time: milliseconds
        ("connect-string-base64", 3, "t6", "24:00:00"),
        ("isostring-precise-bytes", 1, "t3", "10:15:30.123"),
        ("isostring-precise-bytes", 3, "t6", "00:00:00"),  # Debezium's IsoTime wraps 24:00
        ("adaptive-precise-bytes", 1, "ttz", "08:15:30.5Z"),  # ZonedTime: UTC, as written
        # timestamps without zone as microseconds since the epoch
        ("adaptive-precise-bytes", 1, "ts3", 1_767_262_530_123_000),
        ("adaptive-precise-bytes", 3, "ts3", -1_000),
        ("adaptive-precise-bytes", 3, "ts6", -2_208_988_799_999_999),
        ("connect-string-base64", 3, "ts6", -2_208_988_800_000_000),  # Connect: milliseconds
        ("isostring-precise-bytes", 3, "ts6", "1900-01-01T00:00:00.000001"),
        ("adaptive-precise-bytes", 1, "tstz", "2026-01-01T08:15:30.123456Z"),
        ("adaptive-precise-bytes", 1, "d", 20_454),
        ("isostring-precise-bytes", 3, "d", "1900-02-28"),
        ("adaptive-precise-bytes", 1, "iv", 37_091_106_789_000),  # a month is 30.4375 days
        ("isostring-precise-bytes", 1, "iv", "P1Y2M3DT4H5M6.789S"),
        ("adaptive-precise-bytes", 1, "j", '{"a": [1, 2.50, "x"]}'),  # json: its text
        ("adaptive-precise-bytes", 1, "u", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        ("adaptive-precise-bytes", 1, "m", "happy"),
        ("adaptive-precise-bytes", 1, "ints", [1, None, 3]),
        ("adaptive-precise-bytes", 1, "texts", ["a b", None, "c,d"]),
        ("adaptive-precise-bytes", 1, "b", "AP8Q"),  # bytes: base64
        ("connect-string-base64", 1, "b", "AP8Q"),
        ("adaptive-double-hex", 1, "b", "00ff10"),
    ],
)
def test_typed_images_hold_each_value_in_the_form_of_its_type(
    mode: str, key: int, column: str, expected: Any
) -> None:
    """The typed change log's value of one column of a real log."""
    op = "r" if key == 1 else "c"
    assert image(fixture_rows(mode), "public.typed", op, key)[column] == expected


@pytest.mark.parametrize("mode", MODES)
def test_unavailable_values_are_left_out_of_typed_images(mode: str) -> None:
    """Every form of the TOAST placeholder leaves its column out; a NULL set is kept."""
    rows = fixture_rows(mode)
    first, second = (image(rows, "public.typed", "u", 1, n) for n in (0, 1))
    # base64 mode: Debezium 3.6.1 wrote null for the bytea, not the placeholder (data lost)
    lost = {"big_bytes": None} if mode == "connect-string-base64" else {}
    assert {c: first[c] for c in TOASTED if c in first} == lost
    assert {c: second[c] for c in TOASTED if c in second} == {
        **lost,
        "big_text": "u" * 2100,
        "big_json": None,
    }


@pytest.mark.parametrize("mode", MODES)
def test_a_real_log_folds_to_rows_that_keep_what_debezium_could_not_capture(mode: str) -> None:
    """Folded as a mirror folds it, row 1 keeps its TOASTed values from the snapshot."""
    rows = [r for r in fixture_rows(mode) if r["table"] == "public.typed"]
    folded = fold_changes(pa.Table.from_pylist(rows))["public.typed"]
    schema = pa.schema([pa.field(n, arrow_type(t)) for n, t in folded.column_types().items()])
    table = folded.to_arrow(schema)
    by_id = {r["id"]: r for r in table.to_pylist()}
    assert sorted(by_id) == [1, 2, 3]
    assert by_id[2]["_spark_ckpt_action"] == "delete"
    row = by_id[1]
    assert row["_spark_ckpt_missing"] is None  # the snapshot row is whole: nothing to look up
    assert row["big_text"] == "u" * 2100
    assert row["big_json"] is None
    assert row["big_ints"] == list(range(1, 601))
    assert row["big_texts"] == [f"{'x' * 70}{n}" for n in range(1, 31)]
    assert len(row["big_uuids"]) == 140
    assert (
        row["big_bytes"]
        == {
            "adaptive-precise-bytes": b"\xab" * 2100,
            "isostring-precise-bytes": b"\xab" * 2100,
            "adaptive-double-hex": "ab" * 2100,
            "connect-string-base64": None,  # lost by Debezium under base64
        }[mode]
    )


def test_values_no_spark_type_holds_stop_a_mirror_naming_the_column() -> None:
    """Infinite timestamps and dates pass the change log as written; a mirror refuses them."""
    rows = [r for r in fixture_rows("adaptive-precise-bytes") if r["table"] == "public.special"]
    special = image(rows, "public.special", "c", 1)
    assert (special["n"], special["n2"]) == (None, None)  # precise mode writes NaN as null
    assert (special["tstz"], special["ts"]) == ("-infinity", 9_223_372_036_825_200_000)
    folded = fold_changes(pa.Table.from_pylist(rows))["public.special"]
    schema = pa.schema([pa.field(n, arrow_type(t)) for n, t in folded.column_types().items()])
    with pytest.raises(MirrorChangeError, match="column 'ts'"):
        folded.to_arrow(schema)


@pytest.mark.parametrize(
    ("mode", "n", "n2", "f"),
    [
        ("connect-string-base64", "NAN", "NAN", "NaN"),  # Debezium's SpecialValueDecimal names
        ("adaptive-double-hex", "NaN", "NaN", "NaN"),  # JsonConverter: non-finite doubles as text
    ],
)
def test_special_decimals_are_kept_as_debezium_spells_them(
    mode: str, n: str, n2: str, f: str
) -> None:
    """NaN in the string and double decimal modes: the change log keeps Debezium's spelling."""
    special = image(fixture_rows(mode), "public.special", "c", 1)
    assert (special["n"], special["n2"], special["f"]) == (n, n2, f)


# -- single values ---------------------------------------------------------------------------


def _types(*fields: dict[str, Any]) -> ImageTypes:
    return ImageTypes([{"optional": True, **f} for f in fields])


def _decimal_field(scale: int, precision: int | None = None) -> dict[str, Any]:
    parameters = {"scale": str(scale)}
    if precision is not None:
        parameters["connect.decimal.precision"] = str(precision)
    return {
        "type": "bytes",
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": parameters,
        "field": "n",
    }


def _base64(unscaled: int) -> str:
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


@pytest.mark.parametrize(
    ("scale", "precision", "unscaled", "kind", "digits"),
    [
        (2, 12, -123456, "decimal(12,2)", "-1234.56"),
        (8, 10, 1, "decimal(10,8)", "0.00000001"),  # never 1E-8
        (2, 38, 10**37 + 1, "decimal(38,2)", "1" + "0" * 35 + ".01"),  # past 28 digits
        (-2, 5, 12, "decimal(7,0)", "1200"),  # PostgreSQL 15's numeric(5,-2)
        (5, 2, 12, "decimal(5,5)", "0.00012"),  # and numeric(2,5)
        (0, None, 7, "decimal(38,0)", "7"),  # no precision parameter
        (0, 39, 7, "string", "7"),
    ],
)
def test_decimals_keep_every_digit_at_their_scale(
    scale: int, precision: int | None, unscaled: int, kind: str, digits: str
) -> None:
    """Connect's Decimal: a Spark decimal where one fits, the exact digits as the value."""
    types = _types(_decimal_field(scale, precision))
    assert json.loads(types.types_json) == {"n": kind}
    assert types.normalize({"n": _base64(unscaled)}) == {"n": digits}


def test_decimals_written_as_json_numbers_keep_their_digits() -> None:
    """JsonConverter's decimal.format=NUMERIC writes numbers: parsed as decimals, not floats."""
    types = _types(_decimal_field(2, 30), {"type": "double", "field": "x"})
    text = '{"n":1234567890123456789012345678.25,"x":0.1}'
    assert json.loads(_rewritten(text, types)) == {"n": "1234567890123456789012345678.25", "x": 0.1}


@pytest.mark.parametrize(
    ("name", "value", "text"),
    [
        ("io.debezium.time.Time", 36_930_120, "10:15:30.12"),
        ("io.debezium.time.MicroTime", 86_400_000_000, "24:00:00"),
        ("io.debezium.time.NanoTime", 36_930_000_000_001, "10:15:30.000000001"),
        ("org.apache.kafka.connect.data.Time", 0, "00:00:00"),
        ("io.debezium.time.IsoTime", "10:15:30.500Z", "10:15:30.5"),
    ],
)
def test_times_of_day_read_as_postgresql_prints_them(name: str, value: Any, text: str) -> None:
    """Every time-of-day encoding becomes one text form, its fraction without trailing zeros."""
    types = _types({"type": "int64", "name": name, "field": "t"})
    assert types.normalize({"t": value}) == {"t": text}


def test_nanosecond_timestamps_become_microseconds() -> None:
    """NanoTimestamp is cut to microseconds, towards the past (as Spark would)."""
    types = _types({"type": "int64", "name": "io.debezium.time.NanoTimestamp", "field": "at"})
    assert types.normalize({"at": -1}) == {"at": -1}
    assert types.normalize({"at": 1_999}) == {"at": 1}


def test_a_value_unlike_its_schema_is_an_error_naming_the_column() -> None:
    """A Decimal that is not base64 stops the batch: ChangeDecodeError names column and schema."""
    types = _types(_decimal_field(2, 12))
    with pytest.raises(
        ChangeDecodeError, match=r"column 'n' \(org\.apache\.kafka\.connect\.data\.Decimal\)"
    ):
        types.normalize({"n": "not base64!"})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ({"type": "string"}, PLACEHOLDER),
        ({"type": "bytes"}, base64.b64encode(PLACEHOLDER.encode()).decode()),
        ({"type": "array", "items": {"type": "string"}}, [PLACEHOLDER]),
        ({"type": "array", "items": {"type": "int64"}}, list(PLACEHOLDER.encode())),
        (
            {"type": "array", "items": {"type": "int32", "name": "io.debezium.time.Date"}},
            list(PLACEHOLDER.encode()),  # date[]: the numbers, not dates
        ),
        (
            {"type": "array", "items": {"type": "string", "name": "io.debezium.data.Uuid"}},
            ["b68a35a7-17ad-35b3-af2a-ae46edb4545a"],  # Java's nameUUIDFromBytes
        ),
        (
            {"type": "map", "keys": {"type": "string"}, "values": {"type": "string"}},
            {PLACEHOLDER: PLACEHOLDER},  # hstore
        ),
    ],
)
def test_every_form_of_the_default_placeholder_is_left_out(
    field: dict[str, Any], value: Any
) -> None:
    """The placeholder in each form Debezium 3.6.1 gives it, by the column's schema."""
    types = _types({"type": "int32", "field": "id"}, {**field, "field": "c"})
    text = json.dumps({"id": 1, "c": value}, separators=(",", ":"))
    assert types.needs_rewriting(text)
    assert json.loads(_rewritten(text, types)) == {"id": 1}


def test_values_like_the_placeholder_are_data() -> None:
    """Only the exact forms are placeholders: near misses and other types' forms are kept."""
    types = _types(
        {"type": "string", "field": "s"},
        {"type": "array", "items": {"type": "int32"}, "field": "a"},
        {"type": "int32", "field": "n"},
    )
    image = {"s": PLACEHOLDER[:-1], "a": list(PLACEHOLDER.encode())[:-1], "n": 95}
    assert types.normalize(image) == image
    assert not types.needs_rewriting(json.dumps({"s": "text", "a": [95, 96], "n": 95}))


def test_a_placeholder_declared_in_the_schema_is_the_one_looked_for() -> None:
    """Newer Debezium declares the form (__debezium.unavailable.value.placeholder)."""
    declared = {"__debezium.unavailable.value.placeholder": "gone"}
    types = _types(
        {"type": "string", "parameters": declared, "field": "s"},
        {
            "type": "array",
            "items": {"type": "string"},
            "parameters": {"__debezium.unavailable.value.placeholder": '["gone"]'},
            "field": "a",
        },
    )
    assert types.normalize({"s": "gone", "a": ["gone"]}) == {}
    kept = {"s": PLACEHOLDER, "a": [PLACEHOLDER]}  # the default is data where one is declared
    assert types.normalize(kept) == kept
