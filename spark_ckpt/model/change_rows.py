"""The change-row contract: the rows every ``txn-cdc`` connector emits and everything reads.

One module for what the source writes (:mod:`spark_ckpt.sources.schema` gives it Arrow types),
what the mirror folds and logs (:mod:`spark_ckpt.sinks.mirror`), and what readers of a mirror
root rely on (:mod:`spark_ckpt.state.mirrors`). The columns, their order and Spark SQL types,
the optional ``column_types`` column, the order of rows, and the operations, as Debezium's
envelope names them (``op``: ``c``, ``u``, ``d``, ``r``), plus ``s`` for a schema change.
Pure data; documented for users in docs/source.md.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = [
    "CHANGES_TABLE",
    "COLUMNS",
    "COLUMN_NAMES",
    "DATA_OPS",
    "MIRROR_COLUMNS",
    "OP_CREATE",
    "OP_DELETE",
    "OP_READ",
    "OP_SCHEMA_CHANGE",
    "OP_UPDATE",
    "ORDER",
    "SPARK_DDL",
    "TYPES_COLUMN",
    "Op",
    "spark_ddl",
]

CHANGES_TABLE = "_changes"
"""Mirror mode: the change log's directory beneath the mirror root (unless ``changeLog`` says
otherwise): the Delta table every batch is appended to, from which the mirrors are applied."""

COLUMNS: Final[tuple[tuple[str, str], ...]] = (
    ("source", "string"),
    ("txn_id", "string"),
    ("txn_order", "long"),
    ("txn_size", "int"),
    ("event_index", "int"),
    ("commit_ts", "timestamp"),
    ("table", "string"),
    ("op", "string"),
    ("key", "string"),
    ("before", "string"),
    ("after", "string"),
)
"""Name and Spark SQL type of each column of a change row, in order."""

COLUMN_NAMES: Final = tuple(name for name, _ in COLUMNS)
"""The columns' names, in order."""

TYPES_COLUMN: Final = "column_types"
"""The optional last column (``columnTypes=true``): each image's column types as JSON text,
Spark SQL type names (``{"id": "bigint"}``), which mirrors are typed from."""

ORDER: Final = ("txn_order", "event_index")
"""The order of change rows: transactions in commit order, then each one's events in order."""

MIRROR_COLUMNS: Final = (
    "txn_id",
    "txn_order",
    "event_index",
    "commit_ts",
    "table",
    "op",
    "key",
    "before",
    "after",
)
"""The columns mirror mode reads (``column_types`` too, when the stream has it)."""

Op = Literal["c", "u", "d", "r", "s"]
OP_CREATE: Final = "c"
"""An inserted row (``after`` only)."""
OP_UPDATE: Final = "u"
"""An updated row (``after``, and ``before`` where the source has it)."""
OP_DELETE: Final = "d"
"""A deleted row (``before`` only, or the key)."""
OP_READ: Final = "r"
"""A row read by a snapshot (``after`` only)."""
OP_SCHEMA_CHANGE: Final = "s"
"""A table's schema changed (``after``: the new schema and what changed; no row)."""
DATA_OPS: Final = (OP_CREATE, OP_UPDATE, OP_DELETE, OP_READ)
"""The operations that carry a row."""

SPARK_DDL: Final = ", ".join(f"`{name}` {sql}" for name, sql in COLUMNS)
"""The columns as a Spark DDL string (``DataSource.schema()``)."""


def spark_ddl(column_types: bool) -> str:
    """The change rows' schema as Spark DDL, with the ``column_types`` column or without.

    Driver, once per source schema request.
    """
    return SPARK_DDL + (f", `{TYPES_COLUMN}` string" if column_types else "")
