"""The kafka connector's offsets: Spark's per-partition form, in the txn-cdc envelope."""

from __future__ import annotations

import json

import pytest

from spark_ckpt.errors import LogRewrittenError
from spark_ckpt.sources.kafka.offsets import KafkaOffset


def test_offsets_render_as_sparks_kafka_source_does_in_a_fixed_order() -> None:
    offset = KafkaOffset(
        7,
        120,
        {("dbz.transaction", 0): 412, ("dbz.public.orders", 1): 98, ("dbz.public.orders", 0): 5},
        "pg:00000000000022148664:00000000000000000000",
        True,
    )
    rendered = offset.to_json()
    assert json.dumps(rendered) == json.dumps(
        {
            "v": 1,
            "checkpoint": 7,
            "emitted": 120,
            "topics": {
                "dbz.public.orders": {"0": 5, "1": 98},
                "dbz.transaction": {"0": 412},
            },
            "delivered": {"high": "pg:00000000000022148664:00000000000000000000", "snapshot": True},
        }
    )
    assert KafkaOffset.from_json(json.loads(json.dumps(rendered))) == offset
    assert offset.position("dbz.public.orders", 1) == 98
    assert offset.position("dbz.public.items", 0) is None  # new partitions: from the start


@pytest.mark.parametrize(
    "value",
    [
        {"v": 1, "checkpoint": 1, "emitted": 0, "topics": {"t": {"0": -1}}, "delivered": {}},
        {"v": 1, "checkpoint": 1, "emitted": 0, "scan": ["a", 0, 0]},
        {"v": 2, "checkpoint": 1, "emitted": 0, "topics": {}, "delivered": {}},
    ],
)
def test_an_offset_of_another_source_is_refused(value: dict[str, object]) -> None:
    with pytest.raises(LogRewrittenError, match="kafka connector cannot read"):
        KafkaOffset.from_json(value)


def test_schemas_round_trip_and_an_older_offset_has_none() -> None:
    """``schemas``: each table's schema as delivered (columnTypes=true), absent before it."""
    from spark_ckpt.model.schema_changes import ColumnSchema, TableSchema

    schema = TableSchema((ColumnSchema("id", "int", "int32", False),))
    offset = KafkaOffset(3, 9, {("t.public.a", 0): 5}, schemas={"public.a": schema})
    value = offset.to_json()
    assert value["schemas"] == {"public.a": schema.to_json()}
    assert KafkaOffset.from_json(json.loads(json.dumps(value))) == offset
    older = {k: v for k, v in value.items() if k != "schemas"}
    assert KafkaOffset.from_json(older).schemas is None
