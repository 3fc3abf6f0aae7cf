"""Column types from Kafka Connect JSON envelopes (``columnTypes=true``), through the reader."""

from __future__ import annotations

import base64
import json
import tempfile
from decimal import Decimal
from typing import Any

import pyarrow as pa

from spark_ckpt.sinks.mirror.fold import fold_changes
from spark_ckpt.sinks.mirror.types import arrow_type
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
