"""Schema changes in a Debezium change log, from its records' Kafka Connect schemas.

A record written with ``schemas.enable=true`` says its row images' columns: the ``after`` (else
``before``) field of its envelope schema is a struct of one field per column, in the table's
order, each with its Connect type, ``optional`` and ``default``. Kafka Connect's ``JsonConverter``
writes that schema byte for byte the same until the table's columns change, so the native
planner (``native/src/schemas.rs``) passes up only the texts where a table's schema differs
from its previous change's; this module reads them as
:class:`~spark_ckpt.model.schema_changes.TableSchema` s and makes the schema change rows
(``op='s'``) the connector delivers right before the first change under the new schema.

What a Connect schema says and does not:

- A column is ``{name, type (Spark SQL, as the rows' column_types), sourceType, nullable}``.
  ``sourceType`` is the source's own type when Debezium propagates it
  (``column.propagate.source.type`` / ``datatype.propagate.source.type``: parameters
  ``__debezium.source.column.type``, ``.length``, ``.scale``), else the Connect type
  (``int32``, ``io.debezium.time.Date``, ``Decimal(12,2)``). So a ``varchar`` length change is a
  schema change only when the source type is propagated; the column's values are strings either
  way.
- There are no column ids: a column that disappeared while another appeared may be a rename or
  a drop and an add, which the mirror refuses to guess (:meth:`SchemaEvent.ambiguous`). MySQL's
  and MariaDB's connectors write the DDL statement before the changes it affects
  (:mod:`.mysql_ddl`): a column it renames gets the same ``id`` (numbered within the event)
  in ``before`` and ``after``, and the rename is one.
- An added column's ``default`` is Debezium's reading of the column's default expression
  (Debezium's docs, "Default values": PostgreSQL, MySQL/MariaDB). Existing rows read it when the
  source filled them with it, which is the case for a constant default. A default Debezium
  cannot evaluate (``now()``) is left out of the schema: a ``NOT NULL`` column added without a
  known default has ``defaultUnknown``; a nullable one is taken to read NULL in existing rows,
  which is wrong for a volatile default (documented; the ``postgres`` connector reads the
  catalog and knows).
- The key is not in the value's schema: ``key`` is empty, and a primary key change is not seen.

Runs on the driver (planning, once per schema text; cached) and on executors
(:func:`with_schema_rows`, per record batch of a partition that has schema changes).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from spark_ckpt.model.schema_changes import (
    SCHEMA_CHANGE_OP,
    ColumnSchema,
    SchemaChange,
    SchemaEvent,
    TableSchema,
    diff_schemas,
)

from ..schema import COLUMNS
from .mysql_ddl import creates_table, renamed_columns
from .types import field_type, image_fields

__all__ = [
    "PlannedSchemas",
    "SchemaFollower",
    "SchemaRow",
    "follow_units",
    "table_schema",
    "with_schema_rows",
]

_SOURCE_TYPE = "__debezium.source.column.type"
_SOURCE_LENGTH = "__debezium.source.column.length"
_SOURCE_SCALE = "__debezium.source.column.scale"
_CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"


class SchemaRow(NamedTuple):
    """A schema change row to deliver before event ``at`` of transaction ``order``.

    ``before`` and ``after`` are the row's JSON texts (:class:`SchemaEvent`'s).
    """

    order: int
    at: int
    table: str
    before: str | None
    after: str
    summary: str


def _source_type(field: Mapping[str, Any]) -> str:
    parameters = field.get("parameters") or {}
    propagated = parameters.get(_SOURCE_TYPE)
    if isinstance(propagated, str):
        # A length means something below PostgreSQL's "unlimited" (TEXT says 2147483647); a
        # scale of 0 is no scale.
        length, scale = parameters.get(_SOURCE_LENGTH), parameters.get(_SOURCE_SCALE)
        limited = str(length).isdigit() and int(str(length)) < 2**31 - 1
        size = [str(length)] if limited else []
        if size and scale not in (None, "0", 0):
            size.append(str(scale))
        return propagated + (f"({','.join(size)})" if size else "")
    name, kind = field.get("name"), field.get("type")
    if name == _CONNECT_DECIMAL:
        precision = parameters.get("connect.decimal.precision")
        scale = parameters.get("scale", 0)
        return f"Decimal({precision},{scale})" if precision is not None else f"Decimal(,{scale})"
    return str(name or kind)


def _column(field: Mapping[str, Any]) -> ColumnSchema:
    spark_type, rewrite = field_type(field)
    nullable = bool(field.get("optional", True))
    default = field.get("default")
    unreadable = False
    if default is not None and rewrite is not None:
        try:
            default = rewrite(default)
        except (ValueError, TypeError, ArithmeticError):
            default, unreadable = None, True  # not in its type's form: not known
    return ColumnSchema(
        str(field["field"]),
        spark_type,
        _source_type(field),
        nullable,
        None,
        default,
        # Debezium leaves out a default it cannot evaluate: a NOT NULL column without one
        # was filled with values the stream does not carry (or the table was empty).
        unreadable or (default is None and not nullable),
    )


@lru_cache(maxsize=256)
def table_schema(envelope: str) -> TableSchema | None:
    """The table schema an envelope schema's ``after`` (else ``before``) struct says, or None.

    ``default`` / ``default_unknown`` are set on every column: what a column reads in existing
    rows matters only when it is added, where :class:`SchemaFollower` keeps them.
    """
    try:
        fields = image_fields(json.loads(envelope))
    except ValueError:
        return None
    if fields is None:
        return None
    return TableSchema(tuple(_column(f) for f in fields if isinstance(f, dict) and "field" in f))


class SchemaFollower:
    """Each table's schema as delivered, followed through planned units (driver).

    Parameters
    ----------
    schemas
        The schemas an offset recorded (None: an offset written before they were recorded).

    A table's first schema is a ``table_created`` row when a ``CREATE TABLE`` statement of it
    was read before (MySQL, MariaDB), in a unit after others were known, and not in Debezium's
    initial snapshot: Debezium describes every table it starts with by such a statement, and a
    table first seen otherwise may have been there, empty, all along. The rule depends only on
    the log, never on where batches were cut (an offset records the schemas before a unit it
    splits).
    """

    def __init__(self, schemas: Mapping[str, TableSchema] | None) -> None:
        self.state: dict[str, TableSchema] = dict(schemas or {})
        self._announce_new = False

    def begin_unit(self, snapshot: bool) -> None:
        """Start following a unit (Debezium's initial snapshot when ``snapshot``)."""
        self._announce_new = bool(self.state) and not snapshot

    def follow(
        self, order: int, at: int, table: str, envelope: str, ddls: Sequence[str] = ()
    ) -> SchemaRow | None:
        """The schema change row for ``table`` taking ``envelope``'s schema at ``(order, at)``.

        ``ddls`` are the DDL statements read for the table since its previous schema.
        """
        schema = table_schema(envelope)
        if schema is None:
            return None
        kept = schema.plain()
        old = self.state.get(table)
        self.state[table] = kept
        if old is None:
            if not (self._announce_new and any(creates_table(ddl) for ddl in ddls)):
                return None
            changes: tuple[SchemaChange, ...] = (SchemaChange("table_created"),)
        else:
            if old == kept:
                return None
            changes = diff_schemas(old, kept)
            if not changes:
                return None  # only a default changed: existing rows read what they did
        if old is not None and ddls:
            old, schema = _with_rename_ids(old, schema, ddls)
            changes = diff_schemas(old, schema.plain())
        # Only the columns added to a table with rows keep what existing rows read for them.
        event = SchemaEvent(table, old, schema, changes)
        added = {c.name for c in event.added()} if old is not None else set()
        columns = tuple(c if c.name in added else c.plain() for c in schema.columns)
        event = SchemaEvent(table, old, TableSchema(columns), changes)
        return SchemaRow(order, at, table, event.before_json(), event.after_json(), event.summary())


class PlannedSchemas(NamedTuple):
    """What a planned unit says of its tables' schemas, for :func:`follow_units`.

    ``sightings`` are the assembler's ``unit_schemas``: ``(at, table, envelope schema text,
    DDL statements)``. ``snapshot``: Debezium's initial snapshot (its tables are where a query
    starts). ``block``: a unit whose rows are not numbered in transaction order (the ``kafka``
    connector's snapshot and incremental-snapshot chunks): Debezium reads each table of such a
    unit with one query, under one schema, so a change it shows is placed at its start.
    """

    order: int
    sightings: Sequence[tuple[int, str, str, Sequence[str]]]
    snapshot: bool = False
    block: bool = False


def follow_units(
    schemas: Mapping[str, TableSchema] | None, units: Iterable[PlannedSchemas]
) -> tuple[list[SchemaRow], dict[str, TableSchema]]:
    """Follow the tables' schemas from ``schemas`` through ``units``, in order (driver).

    Returns the schema change rows and each table's schema after the units.
    """
    follower = SchemaFollower(schemas)
    rows: list[SchemaRow] = []
    for unit in units:
        follower.begin_unit(unit.snapshot)
        for at, table, envelope, ddls in unit.sightings:
            row = follower.follow(unit.order, 0 if unit.block else at, table, envelope, ddls)
            if row is not None:
                rows.append(row)
    return rows, follower.state


def _with_rename_ids(
    old: TableSchema, new: TableSchema, ddls: Sequence[str]
) -> tuple[TableSchema, TableSchema]:
    """``old`` and ``new`` with one id per column the statements renamed, on both sides."""
    mapping: dict[str, str] = {}  # old name -> its name after the statements so far
    for ddl in ddls:
        for before, after in renamed_columns(ddl):
            # MySQL's column names are case-insensitive: the statement may spell them otherwise.
            source = next((o for o, n in mapping.items() if n.lower() == before.lower()), None)
            if source is None:
                source = next(
                    (c.name for c in old.columns if c.name.lower() == before.lower()), before
                )
            mapping[source] = after
    pairs = []
    for source, target in mapping.items():
        was = next((c for c in old.columns if c.name == source), None)
        now = next((c for c in new.columns if c.name.lower() == target.lower()), None)
        if was is not None and now is not None and new.column(source) is None:
            pairs.append((was.name, now.name))
    ids_old = {was: number for number, (was, _) in enumerate(pairs, 1)}
    ids_new = {now: number for number, (_, now) in enumerate(pairs, 1)}
    return (
        TableSchema(tuple(replace(c, id=ids_old.get(c.name)) for c in old.columns), old.key),
        TableSchema(tuple(replace(c, id=ids_new.get(c.name)) for c in new.columns), new.key),
    )


def with_schema_rows(batch: pa.RecordBatch, rows: Sequence[SchemaRow]) -> pa.RecordBatch:
    """``batch`` with the schema change rows of its transactions, renumbered around them.

    Runs on executors, per record batch of a partition whose plan has schema changes. ``rows``
    are every schema change row of the partition's transactions (a transaction split over
    partitions has all of its in each). A row ``(order, at)`` is added where event ``at`` of
    transaction ``order`` is; each event of that transaction moves up by the schema rows before
    it, and ``txn_size`` counts them.
    """
    if not rows or batch.num_rows == 0:
        return batch
    by_order: dict[int, list[SchemaRow]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r.order, r.at)):
        by_order[row.order].append(row)
    orders = batch.column("txn_order")
    touched = pc.is_in(orders, value_set=pa.array(list(by_order), pa.int64()))
    if not pc.any(touched).as_py():
        return batch
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    out: dict[str, list[Any]] = {name: [] for name in columns}

    def copy(i: int, index: int, size: int) -> None:
        for name, values in columns.items():
            out[name].append(values[i])
        out["event_index"][-1] = index
        out["txn_size"][-1] = size

    for i in range(batch.num_rows):
        order, index, size = (columns[c][i] for c in ("txn_order", "event_index", "txn_size"))
        inserted = by_order.get(order, [])
        for number, schema_row in enumerate(inserted):
            if schema_row.at != index:
                continue
            copy(i, index + number, size + len(inserted))
            out["table"][-1] = schema_row.table
            out["op"][-1] = SCHEMA_CHANGE_OP
            out["key"][-1] = None
            out["before"][-1] = schema_row.before
            out["after"][-1] = schema_row.after
            for name in columns.keys() - _KEPT:
                out[name][-1] = None  # column_types: a schema row has no image
        shift = sum(1 for r in inserted if r.at <= index)
        copy(i, index + shift, size + len(inserted))
    return pa.RecordBatch.from_pydict(out, schema=batch.schema)


_KEPT = frozenset(name for name, _, _ in COLUMNS)
"""The output columns a schema row sets; any other (``column_types``) is null in it."""
