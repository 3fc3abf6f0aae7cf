"""The change rows' Arrow form: the schema of the record batches every connector yields.

The contract itself (columns, order, operations) is :mod:`spark_ckpt.model.change_rows`; this
module gives its columns their Arrow types and builds batches of them (executors).
"""

from __future__ import annotations

import json

import pyarrow as pa

from spark_ckpt.errors import UsageError
from spark_ckpt.model.change_rows import COLUMNS as ROW_COLUMNS
from spark_ckpt.model.change_rows import SPARK_DDL, TYPES_COLUMN, spark_ddl

__all__ = [
    "ARROW_SCHEMA",
    "COLUMNS",
    "SPARK_DDL",
    "TYPES_COLUMN",
    "change_batch",
    "json_text",
    "spark_ddl",
    "with_types",
]

_ARROW_TYPES = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}

COLUMNS: tuple[tuple[str, str, pa.DataType], ...] = tuple(
    (name, sql, _ARROW_TYPES[sql]) for name, sql in ROW_COLUMNS
)
"""Name, Spark SQL type and Arrow type of each output column, in order."""

ARROW_SCHEMA = pa.schema([pa.field(name, arrow) for name, _, arrow in COLUMNS])
"""The schema of the Arrow record batches ``read()`` yields."""


_TYPED_SCHEMA = ARROW_SCHEMA.append(pa.field(TYPES_COLUMN, pa.string()))


def with_types(batch: pa.RecordBatch, column_types: pa.Array | None) -> pa.RecordBatch:
    """``batch`` with the ``column_types`` column (null when ``column_types`` is None).

    Runs on executors, per record batch, only when the source was asked for the column.
    """
    types = pa.nulls(batch.num_rows, pa.string()) if column_types is None else column_types
    return pa.RecordBatch.from_arrays([*batch.columns, types], schema=_TYPED_SCHEMA)


def json_text(value: object) -> str | None:
    """``key`` / ``before`` / ``after`` as compact JSON text (None stays None)."""
    if value is None:
        return None
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def change_batch(**columns: pa.Array) -> pa.RecordBatch:
    """One record batch of the output schema from its columns, given by name.

    Runs on executors, per batch of rows. Every column of :data:`COLUMNS` must be given, so a
    connector building batches column-wise cannot put one in the wrong place.
    """
    names = [name for name, _, _ in COLUMNS]
    if set(columns) != set(names):
        raise UsageError(f"change_batch needs exactly the columns {names}, got {sorted(columns)}")
    return pa.RecordBatch.from_arrays([columns[name] for name in names], schema=ARROW_SCHEMA)
