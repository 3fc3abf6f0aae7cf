"""What both connectors share: the offset envelope, partition splitting, column-wise batches."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_ckpt.errors import LogRewrittenError, UsageError
from spark_ckpt.sources.offsets import OffsetHeader, offset_json, read_offset
from spark_ckpt.sources.partitions import split_after
from spark_ckpt.sources.schema import ARROW_SCHEMA, COLUMNS, change_batch


def test_the_envelope_comes_first_in_a_fixed_order() -> None:
    """v, checkpoint, emitted, then the connector's keys in its own order."""
    value = offset_json(OffsetHeader(4, 9), {"z": 1, "a": 2})
    assert list(value) == ["v", "checkpoint", "emitted", "z", "a"]
    parsed = read_offset(value, "test", lambda header, body: (header, body["z"]))
    assert parsed == (OffsetHeader(4, 9), 1)


@pytest.mark.parametrize(
    "value",
    [
        {"v": 2, "checkpoint": 0, "emitted": 0},
        {"v": 1, "checkpoint": "x", "emitted": 0},
        {"v": 1, "emitted": 0},
        {"v": 1, "checkpoint": 0, "emitted": 0},  # the body's key is missing
    ],
)
def test_an_offset_of_another_source_or_version_is_refused(value: dict[str, Any]) -> None:
    """Anything the envelope or the body cannot read says which connector could not read it."""
    with pytest.raises(LogRewrittenError, match="the test connector cannot read"):
        read_offset(value, "test", lambda header, body: body["z"])


@given(
    st.lists(st.integers(1, 50), min_size=1, max_size=40),
    st.integers(1, 120),
    st.integers(1, 3),
)
def test_partitions_split_only_between_units_and_close_when_full(
    sizes: list[int], per_partition: int, spread: int
) -> None:
    """Splits fall after a unit, never after the last; each run reaches the target first."""
    splits = split_after(sizes, per_partition, spread=spread)
    assert splits == sorted(set(splits))
    assert all(0 <= i < len(sizes) - 1 for i in splits)
    target = max(1, min(per_partition, -(-sum(sizes) // spread)))
    starts = [0, *(i + 1 for i in splits)]
    for lo, hi in zip(starts, [*starts[1:], len(sizes)], strict=True):
        run = sizes[lo:hi]
        closed = hi < len(sizes)
        # A closed run reached the target only with its last unit.
        assert not closed or (sum(run) >= target and sum(run[:-1]) < target)


def test_spread_gives_each_core_work() -> None:
    """With spread=2 a batch smaller than one partition still splits in two."""
    assert split_after([10, 10, 10, 10], 1000) == []
    assert split_after([10, 10, 10, 10], 1000, spread=2) == [1]


def test_change_batch_places_columns_by_name() -> None:
    """Columns given by name land in schema order; a missing one is refused."""
    columns = {name: pa.nulls(1, arrow) for name, _, arrow in COLUMNS}
    columns["op"] = pa.array(["c"])
    batch = change_batch(**dict(reversed(list(columns.items()))))
    assert batch.schema == ARROW_SCHEMA
    assert batch.column("op").to_pylist() == ["c"]
    del columns["key"]
    with pytest.raises(UsageError, match="key"):
        change_batch(**columns)
