"""Schema changes as events of the change stream: a table's schema, what changed, and policies.

A connector that sees a captured table's schema change (PostgreSQL's relation messages, a
Debezium schema) emits one change row for it, in commit order, right before the first change
written under the new schema::

    op='s', table='public.orders', key=null,
    before={"columns": [...], "key": [...]},                 # the schema until here
    after={"columns": [...], "key": [...], "changes": [...]}  # the schema from here on

Each column is ``{"name", "type" (Spark SQL), "sourceType", "nullable", "id"}``; ``id`` is the
source's stable identity of the column (PostgreSQL's ``attnum``), which tells a rename from a drop
and an add, and is null where the source has none. An added column carries ``"default"``: the
value the table's existing rows read for it (PostgreSQL keeps it in ``attmissingval``), or
``"defaultUnknown": true`` when the source filled existing rows in a way the stream does not say
(a volatile default rewrote the table). ``changes`` lists what changed, for people and for
policies; what a mirror does is derived from the two schemas and the column ids
(:meth:`SchemaEvent.column_mapping`), so a swap of two names in one statement is one step.

The policies (``schemaChangeBehavior``) are Flink CDC's ``schema.change.behavior`` where the
meaning is the same: ``evolve`` follows the source, ``fail`` stops, ``ignore`` keeps the mirror's
schema, ``lenient`` follows without ever dropping data. Pure: no Spark, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from spark_ckpt.errors import StateFormatError
from spark_ckpt.model.change_rows import OP_SCHEMA_CHANGE

__all__ = [
    "BEHAVIORS",
    "SCHEMA_CHANGE_OP",
    "Behavior",
    "ChangeKind",
    "ColumnSchema",
    "Rebuild",
    "SchemaChange",
    "SchemaEvent",
    "TableSchema",
    "diff_schemas",
    "is_widening",
    "rebuild_reason",
]

SCHEMA_CHANGE_OP = OP_SCHEMA_CHANGE
"""The ``op`` of a change row that is a schema change (:mod:`.change_rows` names every ``op``)."""

Behavior = Literal["evolve", "fail", "ignore", "lenient"]
BEHAVIORS: tuple[Behavior, ...] = get_args(Behavior)
"""What a mirror does on a schema change: follow it, stop, keep its schema, or follow it without
dropping anything (renamed and dropped columns stay, reading NULL in new rows)."""

Rebuild = Literal["begin", "end"]
"""A schema change event's part in rebuilding a table from a new read of it."""

ChangeKind = Literal[
    "table_created",
    "column_added",
    "column_dropped",
    "column_renamed",
    "column_type_changed",
    "column_nullability_changed",
    "primary_key_changed",
]


@dataclass(frozen=True)
class ColumnSchema:
    """One column of a source table.

    Attributes
    ----------
    name
        The column's name.
    type
        The Spark SQL type it is mirrored as (``bigint``, ``decimal(12,2)``, ``string``).
    source_type
        The source's spelling of its type (``integer``, ``character varying(20)``).
    nullable
        Whether the source allows NULL in it.
    id
        The source's stable identity of the column (PostgreSQL's ``attnum``); None where the
        source has none (then a rename cannot be told from a drop and an add).
    default
        For a column added by a schema change: the value the table's existing rows read.
    default_unknown
        For an added column: existing rows got values the stream does not carry (a volatile
        default made the source rewrite its table).
    """

    name: str
    type: str
    source_type: str
    nullable: bool = True
    id: int | None = None
    default: Any = None
    default_unknown: bool = False

    def to_json(self) -> dict[str, Any]:
        """Render as the event's JSON (``default`` only when set)."""
        value: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "sourceType": self.source_type,
            "nullable": self.nullable,
            "id": self.id,
        }
        if self.default is not None:
            value["default"] = self.default
        if self.default_unknown:
            value["defaultUnknown"] = True
        return value

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> ColumnSchema:
        """Parse :meth:`to_json`."""
        column_id = value.get("id")
        return cls(
            str(value["name"]),
            str(value["type"]),
            str(value.get("sourceType", value["type"])),
            bool(value.get("nullable", True)),
            None if column_id is None else int(column_id),
            value.get("default"),
            bool(value.get("defaultUnknown", False)),
        )

    def plain(self) -> ColumnSchema:
        """The column without what only its adding event says (its default for old rows)."""
        return replace(self, default=None, default_unknown=False)


@dataclass(frozen=True)
class TableSchema:
    """A source table's columns, in the source's order, and its primary key."""

    columns: tuple[ColumnSchema, ...]
    key: tuple[str, ...] = ()
    storage: str | None = None
    """The source's identity of the table's stored rows, where it has one (PostgreSQL's
    ``relfilenode``: a table rewrite changes it); not a schema change by itself."""
    version: str | None = None
    """The source's identity of the table's definition as these columns are, where it has one
    (PostgreSQL: a digest of its columns' numbers, names and types, dropped ones included);
    None when not known for exactly these columns."""

    @property
    def names(self) -> tuple[str, ...]:
        """The columns' names, in order."""
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> ColumnSchema | None:
        """The column called ``name``, or None."""
        for column in self.columns:
            if column.name == name:
                return column
        return None

    def plain(self) -> TableSchema:
        """The schema as it is kept between events (no added columns' defaults)."""
        plain = tuple(c.plain() for c in self.columns)
        return TableSchema(plain, self.key, self.storage, self.version)

    def to_json(self) -> dict[str, Any]:
        """Render as the event's (and offsets') JSON."""
        value: dict[str, Any] = {"columns": [c.to_json() for c in self.columns]}
        value["key"] = list(self.key)
        if self.storage is not None:
            value["storage"] = self.storage
        if self.version is not None:
            value["version"] = self.version
        return value

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> TableSchema:
        """Parse :meth:`to_json`.

        Raises
        ------
        StateFormatError
            When ``value`` is not such a schema.
        """
        try:
            columns = tuple(ColumnSchema.from_json(c) for c in value["columns"])
            storage, version = value.get("storage"), value.get("version")
            keys = tuple(str(k) for k in value.get("key", ()))
            return cls(
                columns,
                keys,
                None if storage is None else str(storage),
                None if version is None else str(version),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise StateFormatError(f"not a table schema: {json.dumps(value)[:200]}") from e


@dataclass(frozen=True)
class SchemaChange:
    """One thing that changed, as people and policies read it.

    Attributes
    ----------
    kind
        What changed.
    column
        The column (its new name for a rename); None for table-level changes.
    previous
        A rename's old name; a type change's old type; a key change's old key (comma list).
    current
        A type change's new type; an added column's type; a key change's new key (comma list).
    """

    kind: ChangeKind
    column: str | None = None
    previous: str | None = None
    current: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Render as the event's JSON (unset fields left out)."""
        value: dict[str, Any] = {"change": self.kind}
        if self.column is not None:
            value["column"] = self.column
        if self.previous is not None:
            value["from"] = self.previous
        if self.current is not None:
            value["to"] = self.current
        return value

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> SchemaChange:
        """Parse :meth:`to_json`."""
        kind = str(value["change"])
        if kind not in get_args(ChangeKind):
            raise StateFormatError(f"unknown schema change {kind!r}")
        return cls(kind, value.get("column"), value.get("from"), value.get("to"))  # type: ignore[arg-type]

    def describe(self) -> str:
        """One line for errors and logs (``column_renamed name -> title``)."""
        if self.kind == "column_renamed":
            return f"{self.kind} {self.previous} -> {self.column}"
        text = self.kind if self.column is None else f"{self.kind} {self.column}"
        if self.previous or self.current:
            text += f" ({self.previous or '-'} -> {self.current or '-'})"
        return text


@dataclass(frozen=True)
class SchemaEvent:
    """A schema change of one table: its schema before and after, and what changed.

    ``before`` is None when the table is new to the stream.
    """

    table: str
    before: TableSchema | None
    after: TableSchema
    changes: tuple[SchemaChange, ...] = field(default=())
    rebuild: Rebuild | None = None
    """``begin``: the mirror cannot follow this change in place, and the connector reads the
    table again from here (its rows up to ``end`` are the table anew); ``end``: that read is
    complete (an event without changes)."""

    def before_json(self) -> str | None:
        """The change row's ``before`` text."""
        return None if self.before is None else _compact(self.before.to_json())

    def after_json(self) -> str:
        """The change row's ``after`` text: the new schema and its ``changes``."""
        value = self.after.to_json()
        value["changes"] = [c.to_json() for c in self.changes]
        if self.rebuild is not None:
            value["rebuild"] = self.rebuild
        return _compact(value)

    @classmethod
    def from_row(cls, table: str, before: str | None, after: str | None) -> SchemaEvent:
        """Parse a schema change row's ``before`` and ``after`` texts.

        Raises
        ------
        StateFormatError
            When they are not a schema change's.
        """
        if after is None:
            raise StateFormatError(f"table {table}: a schema change row without 'after'")
        try:
            parsed = json.loads(after)
            changes = tuple(SchemaChange.from_json(c) for c in parsed.get("changes", ()))
            old = None if before is None else TableSchema.from_json(json.loads(before))
            rebuild = parsed.get("rebuild")
            if rebuild not in (None, *get_args(Rebuild)):
                raise ValueError(f"rebuild {rebuild!r}")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise StateFormatError(
                f"table {table}: a schema change row that is not one: {after[:200]!r}"
            ) from e
        return cls(table, old, TableSchema.from_json(parsed), changes, rebuild)

    def column_mapping(self) -> dict[str, str | None]:
        """Each column of ``before`` -> its name in ``after`` (None: dropped).

        Columns match by id where both sides have one, else by name.
        """
        if self.before is None:
            return {}
        matched = _match(self.before, self.after)
        return {old.name: (new.name if new else None) for old, new in matched}

    def added(self) -> tuple[ColumnSchema, ...]:
        """The columns of ``after`` that no column of ``before`` became."""
        if self.before is None:
            return self.after.columns
        kept = {new.name for _, new in _match(self.before, self.after) if new is not None}
        return tuple(c for c in self.after.columns if c.name not in kept)

    def ambiguous(self) -> tuple[str, ...]:
        """Dropped columns that may have been renamed to an added one: no ids tell.

        A column without an id that disappeared while another without one appeared is a rename
        or a drop and an add; a mirror must not guess.
        """
        if self.before is None:
            return ()
        dropped = [o for o, n in _match(self.before, self.after) if n is None and o.id is None]
        added = [c for c in self.added() if c.id is None]
        return tuple(c.name for c in dropped) if added else ()

    def describe(self) -> str:
        """The changes in one line, for errors and logs."""
        return "; ".join(c.describe() for c in self.changes) or "no change"

    def summary(self) -> str:
        """The table and its changes in one line, for progress events and the history."""
        return f"{self.table}: {self.describe()}"


def _match(
    before: TableSchema, after: TableSchema
) -> list[tuple[ColumnSchema, ColumnSchema | None]]:
    """Pair each column of ``before`` with what it became in ``after`` (None: dropped)."""
    by_id = {c.id: c for c in after.columns if c.id is not None}
    by_name = {c.name: c for c in after.columns}
    taken: set[str] = set()
    pairs: list[tuple[ColumnSchema, ColumnSchema | None]] = []
    for old in before.columns:
        # By id where there are ids (an id gone is a drop, whatever took its name), else by name.
        new = by_id.get(old.id) if old.id is not None and by_id else by_name.get(old.name)
        if new is not None and new.name in taken:
            new = None
        if new is not None:
            taken.add(new.name)
        pairs.append((old, new))
    return pairs


def diff_schemas(before: TableSchema | None, after: TableSchema) -> tuple[SchemaChange, ...]:
    """What changed from ``before`` to ``after`` (columns matched by id, else by name).

    Drops, renames, type and nullability changes in ``before``'s order, then additions in
    ``after``'s order, then a primary key change.
    """
    if before is None:
        return (SchemaChange("table_created"),)
    changes: list[SchemaChange] = []
    for old, new in _match(before, after):
        if new is None:
            changes.append(SchemaChange("column_dropped", old.name, old.type))
            continue
        if new.name != old.name:
            changes.append(SchemaChange("column_renamed", new.name, old.name))
        if (new.type, new.source_type) != (old.type, old.source_type):
            changes.append(
                SchemaChange("column_type_changed", new.name, old.source_type, new.source_type)
            )
        if new.nullable != old.nullable:
            changes.append(
                SchemaChange(
                    "column_nullability_changed",
                    new.name,
                    "NULL" if old.nullable else "NOT NULL",
                    "NULL" if new.nullable else "NOT NULL",
                )
            )
    event = SchemaEvent("", before, after)
    changes += [SchemaChange("column_added", c.name, None, c.type) for c in event.added()]
    if before.key != after.key:
        changes.append(
            SchemaChange("primary_key_changed", None, ",".join(before.key), ",".join(after.key))
        )
    return tuple(changes)


_INTEGERS = ("tinyint", "smallint", "int", "bigint")
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_INTEGER_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}


def _decimal(type_name: str) -> tuple[int, int] | None:
    match = _DECIMAL.match(type_name)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def is_widening(old: str, new: str) -> bool:
    """Whether every value of Spark SQL type ``old`` is the same value in type ``new``.

    Delta's type widening changes (integers to wider integers, ``float`` to ``double``,
    integers to ``double`` or a wide enough ``decimal``, ``decimal`` precision and scale up with
    no fewer integer digits, ``date`` to ``timestamp_ntz``) and no change at all.
    """
    if old == new:
        return True
    if old in _INTEGERS and new in _INTEGERS:
        return _INTEGERS.index(new) > _INTEGERS.index(old)
    if (old, new) == ("float", "double") or (old, new) == ("date", "timestamp_ntz"):
        return True
    if old in _INTEGERS and new == "double":
        return old != "bigint"
    to = _decimal(new)
    if to is None:
        return False
    if old in _INTEGERS:
        return to[0] - to[1] >= _INTEGER_DIGITS[old]
    source = _decimal(old)
    return source is not None and to[1] >= source[1] and to[0] - to[1] >= source[0] - source[1]


def rebuild_reason(event: SchemaEvent) -> str | None:
    """Why a mirror cannot follow ``event`` in place, or None when it can (pure, per event).

    A type change that is not a widening either way (``text`` to ``int``: the source converted
    every stored value, and the stream carries none of them), an added column whose values in
    existing rows the stream does not carry (a volatile default rewrote the table), and a
    column that disappeared while another appeared with no ids to tell a rename. A connector
    that can read a table again starts that read here (``rebuild='begin'``).
    """
    if event.before is None:
        return None
    ambiguous = event.ambiguous()
    if ambiguous:
        return (
            f"column(s) {', '.join(ambiguous)} disappeared while others appeared, and the "
            f"source gives no column ids to tell a rename from a drop and an add"
        )
    old_types = {c.name: c.type for c in event.before.columns}
    for old, new in event.column_mapping().items():
        column = None if new is None else event.after.column(new)
        if column is None:
            continue
        if not is_widening(old_types[old], column.type) and not is_widening(
            column.type, old_types[old]
        ):
            return (
                f"column {old} changed type from {old_types[old]} to {column.type}, which is "
                f"not a widening"
            )
    for added in event.added():
        if added.default_unknown:
            return (
                f"column {added.name} was added with values for existing rows that the change "
                f"stream does not carry (a volatile default made the source rewrite the table)"
            )
    return None


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
