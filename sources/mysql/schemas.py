"""The captured tables' schemas, followed through the binlog: table maps and DDL statements.

With ``binlog_row_metadata=FULL`` every row event's table map names the columns and their types
as the rows were written, so a table's schema is known exactly at every position without a
schema history to replay: a table map that differs from the schema last delivered is a schema
change, emitted as one change row (``op='s'``, :mod:`spark_ckpt.model.schema_changes`) right
before the first row written under it, in the same transaction.

A table map has no column identity, so a renamed column looks like one dropped and one added.
The DDL statement that renamed it (a ``QUERY`` event before those rows: ``RENAME COLUMN a TO b``
or ``CHANGE a b ...``, read by :mod:`spark_ckpt.sources.debezium_format.mysql_ddl`) says which:
its renames wait for the table's next table map, and columns carry ids of the tracker's own (a
column keeps its id under a new name; a new column gets the next one), so the mirror renames
the column instead of losing its values. The binlog does not carry what existing rows read for
a column just added (MySQL fills them with its default): the server's catalog says, where it can
(:func:`~.server.added_column_default`). Nullability is not in what the client keeps of a table
map, so columns are nullable here.

The state (schemas, and renames not yet seen in a table map) is kept in the offset, so a
restarted query compares with what it delivered; a table first seen takes its table map as it
is, with no event (the mirror is created from its first rows). Pure; runs on the driver, per
row event and per DDL statement of a captured table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from spark_ckpt.errors import StateFormatError
from spark_ckpt.model.schema_changes import ColumnSchema, SchemaEvent, TableSchema, diff_schemas

from ..debezium_format.mysql_ddl import renamed_columns
from .types import BINARY_CHARSET, FieldType, MySqlColumn, spark_type
from .values import json_value

__all__ = [
    "ColumnsSignature",
    "SchemaState",
    "SchemaTracker",
    "columns_signature",
    "schema_signature",
    "source_type",
    "table_schema",
]

ColumnsSignature = tuple[tuple[str, str, str], ...]
"""A table's columns as ``(name, Spark type, source type)``, in their order: what its rows hold,
as a table map, the catalog or a delivered schema describe them (no ids, no defaults)."""

_NAMES = {
    FieldType.DECIMAL: "decimal",
    FieldType.NEWDECIMAL: "decimal",
    FieldType.TINY: "tinyint",
    FieldType.SHORT: "smallint",
    FieldType.INT24: "mediumint",
    FieldType.LONG: "int",
    FieldType.LONGLONG: "bigint",
    FieldType.FLOAT: "float",
    FieldType.DOUBLE: "double",
    FieldType.YEAR: "year",
    FieldType.DATE: "date",
    FieldType.NEWDATE: "date",
    FieldType.TIME: "time",
    FieldType.TIME2: "time",
    FieldType.DATETIME: "datetime",
    FieldType.DATETIME2: "datetime",
    FieldType.TIMESTAMP: "timestamp",
    FieldType.TIMESTAMP2: "timestamp",
    FieldType.BIT: "bit",
    FieldType.JSON: "json",
    FieldType.ENUM: "enum",
    FieldType.SET: "set",
    FieldType.GEOMETRY: "geometry",
    FieldType.VARCHAR: "varchar",
    FieldType.VAR_STRING: "varchar",
    FieldType.STRING: "char",
    FieldType.TINY_BLOB: "blob",
    FieldType.MEDIUM_BLOB: "blob",
    FieldType.LONG_BLOB: "blob",
    FieldType.BLOB: "blob",
}
_BINARY_NAMES = {"varchar": "varbinary", "char": "binary"}
_TEXT_NAMES = {"blob": "text"}


def source_type(column: MySqlColumn) -> str:
    """The column's type as far as its table map tells (``decimal(12,4)``, ``int unsigned``).

    Lengths of strings are left out: the table map gives them in bytes of the character set.
    """
    known = column.code in FieldType._value2member_map_
    name = _NAMES.get(FieldType(column.code), "") if known else ""
    name = name or f"type {column.code}"
    if name in _BINARY_NAMES and column.charset == BINARY_CHARSET:
        name = _BINARY_NAMES[name]
    elif name in _TEXT_NAMES and column.charset not in (None, BINARY_CHARSET):
        name = _TEXT_NAMES[name]
    if name == "decimal" and column.precision is not None:
        name = f"decimal({column.precision},{column.scale or 0})"
    elif name in ("time", "datetime", "timestamp") and column.fsp:
        name = f"{name}({column.fsp})"
    elif name == "bit":
        name = f"bit({column.bits or 1})"
    elif name in ("enum", "set") and column.members:
        name = f"{name}({','.join(repr(m) for m in column.members)})"
    if column.unsigned:
        name += " unsigned"
    return name


def table_schema(
    columns: tuple[MySqlColumn, ...],
    known: TableSchema | None,
    renames: tuple[tuple[str, str], ...] = (),
) -> TableSchema:
    """The schema a table map describes, with column ids carried over from ``known``.

    A column keeps the id of the known column of its name, or of the one a pending rename
    names as its old name; any other column gets the next id.
    """
    ids: dict[str, int] = {}
    if known is not None:
        ids = {c.name: c.id for c in known.columns if c.id is not None}
        for old, new in renames:
            if old in ids:
                ids[new] = ids.pop(old)
    taken = set(ids.values())
    next_id = max(taken, default=0) + 1
    described: list[ColumnSchema] = []
    for column in columns:
        column_id = ids.get(column.name)
        if column_id is None:
            column_id, next_id = next_id, next_id + 1
        described.append(
            ColumnSchema(column.name, spark_type(column), source_type(column), True, column_id)
        )
    key = tuple(c.name for c in columns if c.primary)
    return TableSchema(tuple(described), key)


@dataclass(frozen=True)
class SchemaState:
    """Each captured table's schema as delivered, and renames no table map has shown yet."""

    tables: Mapping[str, TableSchema] = field(default_factory=dict)
    renames: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The offset's ``schemas`` value (tables sorted; renames only when pending)."""
        value: dict[str, Any] = {
            "tables": {t: self.tables[t].to_json() for t in sorted(self.tables)}
        }
        if self.renames:
            value["renames"] = {t: [list(p) for p in self.renames[t]] for t in sorted(self.renames)}
        return value

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> SchemaState:
        """Parse :meth:`to_json`.

        Raises
        ------
        StateFormatError
            When ``value`` is not such a state.
        """
        try:
            tables = {t: TableSchema.from_json(s) for t, s in value["tables"].items()}
            renames = {
                t: tuple((str(o), str(n)) for o, n in pairs)
                for t, pairs in value.get("renames", {}).items()
            }
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise StateFormatError(f"not a mysql schema state: {str(value)[:200]}") from e
        return cls(tables, renames)


class SchemaTracker:
    """Follows the captured tables' schemas through one read of the binlog (driver).

    Parameters
    ----------
    state
        The state as of the read's start (the start offset's).
    defaults
        ``(table, column) -> (known, value)``: what existing rows read for a column just added
        (the server's catalog: :func:`~.server.added_column_default`); None: not known. An
        added column whose value in existing rows is not known is marked ``defaultUnknown``, so
        a mirror stops rather than fill them with NULL.
    """

    def __init__(
        self,
        state: SchemaState,
        defaults: Callable[[str, str], tuple[bool, Any]] | None = None,
    ) -> None:
        self._defaults = defaults
        self.state = state
        """As of the last event followed (replaced, never mutated)."""
        self.committed = state
        """As of the last commit or statement read: where a read that stops resumes."""

    def statement(self, table: str, sql: str) -> None:
        """A DDL statement on ``table``: its column renames wait for the next table map."""
        pairs = tuple(renamed_columns(sql))
        if pairs:
            pending = {**self.state.renames, table: (*self.state.renames.get(table, ()), *pairs)}
            self.state = SchemaState(self.state.tables, pending)
        self.committed = self.state

    def observe(self, table: str, columns: tuple[MySqlColumn, ...]) -> SchemaEvent | None:
        """The schema change a row event's table map shows, if any (per row event)."""
        known = self.state.tables.get(table)
        if known is not None and _same(known, columns):
            return None
        renames = self.state.renames.get(table, ())
        current = table_schema(columns, known, renames)
        pending = {t: p for t, p in self.state.renames.items() if t != table}
        self.state = SchemaState({**self.state.tables, table: current}, pending)
        if known is None:
            return None
        changes = diff_schemas(known, current)
        if not changes:
            return None
        event = SchemaEvent(table, known, current, changes)
        added = {c.name for c in event.added()}
        if not added:
            return event
        by_name = {c.name: c for c in columns}
        described = tuple(
            self._added(table, c, by_name[c.name]) if c.name in added else c
            for c in current.columns
        )
        return replace(event, after=replace(current, columns=described))

    def _added(self, table: str, column: ColumnSchema, source: MySqlColumn) -> ColumnSchema:
        """An added column with what existing rows read for it (or marked unknown)."""
        known, value = self._defaults(table, column.name) if self._defaults else (False, None)
        if not known:
            return replace(column, default_unknown=True)
        return replace(column, default=json_value(value, source))

    def commit(self) -> None:
        """A transaction was committed: its schemas are where a later read resumes."""
        self.committed = self.state

    def rollback(self) -> None:
        """A transaction still open is read again later: forget what it showed."""
        self.state = self.committed


def columns_signature(columns: Sequence[MySqlColumn]) -> ColumnsSignature:
    """The signature of columns as a table map or the catalog describes them."""
    return tuple((c.name, spark_type(c), source_type(c)) for c in columns)


def schema_signature(schema: TableSchema) -> ColumnsSignature:
    """The signature of a schema as delivered (:func:`table_schema`'s)."""
    return tuple((c.name, c.type, c.source_type) for c in schema.columns)


def _same(known: TableSchema, columns: tuple[MySqlColumn, ...]) -> bool:
    """Whether a table map describes the schema already known (the common case)."""
    return schema_signature(known) == columns_signature(columns) and known.key == tuple(
        c.name for c in columns if c.primary
    )
