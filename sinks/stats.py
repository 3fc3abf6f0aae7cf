"""Delta per-file column statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``).

Accumulated from the Arrow batches while a file is written (executors), so no file is read back.
Statistics only ever *widen*: a min is at most the true minimum and a max at least the true
maximum, so data skipping never drops a file it needs. Long strings keep a 32-character prefix as
their min and have no max; sub-millisecond timestamps round outward; types whose JSON form could
lose precision (decimals, floats that are NaN) get no min/max.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

import pyarrow as pa

__all__ = ["StatsCollector"]

_STRING_PREFIX = 32
_MAX_INDEXED_COLUMNS = 32  # Delta's default dataSkippingNumIndexedCols
_EPOCH = dt.datetime(1970, 1, 1)


def _timestamp_text(value: int, unit: str, tz: str | None, *, round_up: bool) -> str | None:
    """A timestamp statistic in milliseconds, rounded outward (driver or executor, per file).

    None when rounding leaves the range Python's datetime holds: a max after
    9999-12-31 23:59:59.999 rounds up past it.
    """
    per_ms = {"s": 0, "ms": 1, "us": 1000, "ns": 1_000_000}[unit]
    if per_ms == 0:
        ms = value * 1000
    else:
        ms = value // per_ms
        if round_up and value % per_ms:
            ms += 1
    try:
        stamp = _EPOCH + dt.timedelta(milliseconds=ms)
    except OverflowError:
        return None  # no statistic is a safe one: data skipping then never drops the file
    text = stamp.isoformat(timespec="milliseconds")  # four-digit years, also before 1000
    return text + "Z" if tz is not None else text


class StatsCollector:
    """Collects Delta statistics for the rows of one data file.

    Parameters
    ----------
    schema
        The file's Arrow schema; only its first 32 top-level primitive columns get min/max.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self._rows = 0
        self._nulls: dict[str, int] = {}
        self._min: dict[str, Any] = {}
        self._max: dict[str, Any] = {}
        self._dead: set[str] = set()  # columns whose min/max cannot be represented
        self._indexed = [f for f in schema][:_MAX_INDEXED_COLUMNS]

    def add(self, batch: pa.RecordBatch) -> None:
        """Account for one record batch written to the file."""
        import pyarrow.compute as pc  # lazily: 0.1 s per process, unused by append commits

        self._rows += batch.num_rows
        for field in self._indexed:
            column = batch.column(field.name)
            if pa.types.is_nested(field.type):
                continue
            self._nulls[field.name] = self._nulls.get(field.name, 0) + column.null_count
            if field.name in self._dead or column.null_count == len(column):
                continue
            kind = field.type
            if not (
                pa.types.is_integer(kind)
                or pa.types.is_floating(kind)
                or pa.types.is_string(kind)
                or pa.types.is_large_string(kind)
                or pa.types.is_date(kind)
                or pa.types.is_timestamp(kind)
            ):
                self._dead.add(field.name)
                continue
            extremes = pc.min_max(column)
            low, high = extremes["min"].as_py(), extremes["max"].as_py()
            if pa.types.is_timestamp(kind):
                low = extremes["min"].cast(pa.int64()).as_py()
                high = extremes["max"].cast(pa.int64()).as_py()
            if isinstance(low, float) and (math.isnan(low) or math.isnan(high)):
                self._dead.add(field.name)
                continue
            if field.name not in self._min or low < self._min[field.name]:
                self._min[field.name] = low
            if field.name not in self._max or high > self._max[field.name]:
                self._max[field.name] = high

    @property
    def rows(self) -> int:
        """Rows accounted so far."""
        return self._rows

    def to_json(self) -> str:
        """The statistics as the JSON text Delta's ``add.stats`` holds."""
        minimum: dict[str, Any] = {}
        maximum: dict[str, Any] = {}
        for field in self._indexed:
            name = field.name
            if name in self._dead or name not in self._min:
                continue
            low, high = self._min[name], self._max[name]
            kind = field.type
            if pa.types.is_timestamp(kind):
                low = _timestamp_text(low, kind.unit, kind.tz, round_up=False)
                high = _timestamp_text(high, kind.unit, kind.tz, round_up=True)
                if low is not None:
                    minimum[name] = low
                if high is not None:
                    maximum[name] = high
                continue
            if pa.types.is_date(kind):
                low, high = low.isoformat(), high.isoformat()
            elif isinstance(low, float) and (math.isinf(low) or math.isinf(high)):
                continue
            if isinstance(low, str) and not pa.types.is_date(kind):
                minimum[name] = low[:_STRING_PREFIX]
                if len(high) <= _STRING_PREFIX:
                    maximum[name] = high
                continue
            minimum[name], maximum[name] = low, high
        stats = {
            "numRecords": self._rows,
            "minValues": minimum,
            "maxValues": maximum,
            "nullCount": dict(self._nulls),
        }
        return json.dumps(stats, separators=(",", ":"), ensure_ascii=False)
