"""Delta file statistics at the edges of their types: they only ever widen, and never fail."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa

from spark_ckpt.sinks.stats import StatsCollector


def _stats(array: pa.Array) -> dict[str, dict[str, object]]:
    batch = pa.RecordBatch.from_arrays([array], names=["c"])
    collector = StatsCollector(batch.schema)
    collector.add(batch)
    return json.loads(collector.to_json())  # type: ignore[no-any-return]


def test_a_timestamp_max_that_rounds_past_year_9999_has_no_max_but_keeps_its_min() -> None:
    """A max rounded up past year 9999 is left out instead of failing the commit.

    MySQL's DATETIME(6) reaches 9999-12-31 23:59:59.999999; in milliseconds the max rounds up
    past what a datetime holds. A file without a max is never skipped, so leaving it out is safe.
    """
    values = [dt.datetime(1000, 1, 1, 0, 0, 0, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)]
    for kind in (pa.timestamp("us"), pa.timestamp("us", tz="UTC")):
        stats = _stats(pa.array(values, kind))
        zone = "Z" if kind.tz else ""
        assert stats["minValues"] == {"c": f"1000-01-01T00:00:00.000{zone}"}
        assert stats["maxValues"] == {}
        assert stats["numRecords"] == 2


def test_timestamp_statistics_round_outward_to_milliseconds() -> None:
    values = [
        dt.datetime(2024, 2, 29, 12, 5, 0, 125_400),
        dt.datetime(2024, 2, 29, 12, 5, 0, 250_001),
    ]
    stats = _stats(pa.array(values, pa.timestamp("us")))
    assert stats["minValues"] == {"c": "2024-02-29T12:05:00.125"}
    assert stats["maxValues"] == {"c": "2024-02-29T12:05:00.251"}
