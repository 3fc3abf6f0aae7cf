"""The output schema every ``txn-cdc`` connector produces (DESIGN.md §2), and its Arrow form."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa

from spark_ckpt.errors import UsageError
from spark_ckpt.state.mirrors import TYPES_COLUMN

__all__ = [
    "ARROW_SCHEMA",
    "COLUMNS",
    "SPARK_DDL",
    "TYPES_COLUMN",
    "RowBuffer",
    "change_batch",
    "json_text",
    "spark_ddl",
    "with_types",
]

COLUMNS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("source", "string", pa.string()),
    ("txn_id", "string", pa.string()),
    ("txn_order", "long", pa.int64()),
    ("txn_size", "int", pa.int32()),
    ("event_index", "int", pa.int32()),
    ("commit_ts", "timestamp", pa.timestamp("us", tz="UTC")),
    ("table", "string", pa.string()),
    ("op", "string", pa.string()),
    ("key", "string", pa.string()),
    ("before", "string", pa.string()),
    ("after", "string", pa.string()),
)
"""Name, Spark SQL type and Arrow type of each output column, in order."""

SPARK_DDL = ", ".join(f"`{name}` {sql}" for name, sql, _ in COLUMNS)
"""The schema as a Spark DDL string (``DataSource.schema()``)."""

ARROW_SCHEMA = pa.schema([pa.field(name, arrow) for name, _, arrow in COLUMNS])
"""The schema of the Arrow record batches ``read()`` yields."""


_TYPED_SCHEMA = ARROW_SCHEMA.append(pa.field(TYPES_COLUMN, pa.string()))


def spark_ddl(column_types: bool) -> str:
    """The output schema as Spark DDL, with the ``column_types`` column or without."""
    return SPARK_DDL + (f", `{TYPES_COLUMN}` string" if column_types else "")


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


class RowBuffer:
    """Collects output rows column by column and hands them out as Arrow record batches.

    Runs on executors, inside ``read()``; one per task.

    Parameters
    ----------
    batch_rows
        Rows per record batch.
    column_types
        Rows carry a last value, the ``column_types`` text (or None).
    """

    def __init__(self, batch_rows: int = 8192, column_types: bool = False) -> None:
        self._batch_rows = batch_rows
        self._typed = column_types
        # Rows as given, transposed once per flush (zip in C): a Python loop over the columns of
        # every row cost more than decoding the row.
        self._rows: list[Sequence[object]] = []

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, row: Sequence[object]) -> None:
        """Add one row of :data:`COLUMNS` values; ``commit_ts`` in epoch microseconds (or None)."""
        self._rows.append(row)

    @property
    def full(self) -> bool:
        """True when a record batch's worth of rows is buffered."""
        return len(self) >= self._batch_rows

    def flush(self) -> pa.RecordBatch:
        """Return the buffered rows as one record batch and empty the buffer."""
        # strict: a row of the wrong width fails here instead of shifting every later column.
        width = len(COLUMNS) + self._typed
        columns = list(zip(*self._rows, strict=True)) or [() for _ in range(width)]
        kinds = [arrow for _, _, arrow in COLUMNS] + [pa.string()] * self._typed
        arrays = [pa.array(values, type=kind) for values, kind in zip(columns, kinds, strict=True)]
        self._rows = []
        return pa.RecordBatch.from_arrays(
            arrays, schema=_TYPED_SCHEMA if self._typed else ARROW_SCHEMA
        )
