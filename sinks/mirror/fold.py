"""Folding one batch's changes into the final state of each changed row, per source table.

A batch holds whole source transactions in commit order. Applying it to a mirror needs only the
last state of every primary key the batch touched, so the changes are folded in
``(txn_order, event_index)`` order:

- ``c`` / ``r`` (insert, snapshot read): the row is the ``after`` image;
- ``u``: the ``after`` image is merged over what the batch already had for the key. A column the
  image does not carry (PostgreSQL leaves unchanged TOASTed values out) keeps its old value: the
  batch's, or else the mirror's (recorded as *missing*, resolved when the table is rewritten);
- ``u`` whose ``before`` image holds another key (a primary-key update): the old key is deleted,
  and the new row takes its missing columns from the old key's row;
- ``d``: the key is deleted;
- ``t`` (truncate, where a connector carries it): everything before it is dropped and the table is
  emptied;
- ``s`` (a schema change): the rows folded so far are carried over to the new schema (renamed and
  dropped columns, an added column's value for rows that existed), and the event is kept for the
  mirror to follow (:mod:`.evolution`).

Pure (no Spark, no I/O); runs on the driver in the batch's pre-commit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from spark_ckpt.errors import MirrorChangeError, StateFormatError
from spark_ckpt.model.change_rows import (
    DATA_OPS,
    OP_CREATE,
    OP_DELETE,
    OP_READ,
    ORDER,
    TYPES_COLUMN,
)
from spark_ckpt.model.schema_changes import SCHEMA_CHANGE_OP, SchemaEvent

from .types import infer_type, to_arrow, widen

__all__ = [
    "ACTION",
    "END_AT",
    "FROM_KEY",
    "META_COLUMNS",
    "MISSING",
    "START_AT",
    "FoldedTable",
    "RowState",
    "empty_folded",
    "fold_changes",
    "row_position",
]

ACTION = "_spark_ckpt_action"
"""``upsert`` or ``delete``."""
MISSING = "_spark_ckpt_missing"
"""Columns an update did not carry (kept from the stored row); null when the row is whole."""
FROM_KEY = "_spark_ckpt_from_key"
"""JSON of the key whose stored row fills the missing columns (a primary-key update), or null."""
META_COLUMNS = (ACTION, MISSING, FROM_KEY)

START_AT = "__start_at"
"""SCD type 2: when the row version became current (its change's commit time)."""
END_AT = "__end_at"
"""SCD type 2: when the row version stopped being current (null: it still is)."""


@dataclass
class RowState:
    """The batch's last word on one key.

    Attributes
    ----------
    values
        The row's column values (JSON values); None when the key is deleted.
    given
        The columns the changes carried; None when the row is whole (an insert or a read).
    from_key
        The key whose stored row fills the columns not given (a primary-key update), or None.
    """

    values: dict[str, Any] | None
    given: frozenset[str] | None = None
    from_key: tuple[Any, ...] | None = None


@dataclass
class FoldedTable:
    """One source table's folded changes of a batch.

    Attributes
    ----------
    name
        The source table (``schema.table``).
    key_columns
        The primary key's columns, from the changes' ``key``.
    truncated
        The batch truncated the table: the mirror is emptied before the rows are applied.
    explicit_types
        Column types the stream carried (``column_types``), in source column order.
    rows
        The final state per key, in the order keys were last changed.
    changes
        How many changes were folded.
    """

    name: str
    key_columns: tuple[str, ...]
    truncated: bool = False
    explicit_types: dict[str, str] = field(default_factory=dict)
    rows: dict[tuple[Any, ...], RowState] = field(default_factory=dict)
    changes: int = 0
    versions: list[tuple[tuple[Any, ...], RowState, Any]] = field(default_factory=list)
    """SCD type 2: every state a key went through, with the change's commit time, in order."""
    schema_events: list[tuple[SchemaEvent, str]] = field(default_factory=list)
    """The table's schema changes in the batch, in order, each with where it is in the source."""

    def follow_schema(self, event: SchemaEvent) -> None:
        """Carry the rows folded so far over to ``event``'s schema (driver, per event).

        Renamed columns take their new names, dropped ones go, and a whole row (inserted in
        this batch) reads an added column's value for existing rows, as the source's row does.
        A new primary key re-keys the rows from their values.

        Raises
        ------
        MirrorChangeError
            A new primary key that a row folded before it does not hold whole.
        """
        mapping = event.column_mapping()

        def name(column: str) -> str | None:
            return mapping.get(column, column)

        defaults = {c.name: c.default for c in event.added() if c.default is not None}

        def carry(state: RowState) -> RowState:
            if state.values is None:
                return state
            values = {str(name(k)): v for k, v in state.values.items() if name(k) is not None}
            if state.given is None:
                for column, default in defaults.items():
                    values.setdefault(column, default)
                return RowState(values, None, state.from_key)
            given = frozenset(str(name(k)) for k in state.given if name(k) is not None)
            return RowState(values, given, state.from_key)

        self.rows = {key: carry(state) for key, state in self.rows.items()}
        self.versions = [(key, carry(state), at) for key, state, at in self.versions]
        self.explicit_types = {
            str(name(k)): t for k, t in self.explicit_types.items() if name(k) is not None
        }
        self.explicit_types.update({c.name: c.type for c in event.added()})
        new_key = event.after.key
        renamed_key = tuple(str(name(k)) for k in self.key_columns)
        if new_key and self.key_columns and new_key != renamed_key:
            self._rekey(new_key)
        self.key_columns = new_key or renamed_key

    def _rekey(self, key_columns: tuple[str, ...]) -> None:
        """Key the rows folded so far by ``key_columns`` (a primary key change)."""
        rows: dict[tuple[Any, ...], RowState] = {}
        for key, state in self.rows.items():
            if state.values is None or state.given is not None:
                raise MirrorChangeError(
                    f"table {self.name}: its primary key changed to ({', '.join(key_columns)}) "
                    f"after a change of key {list(key)} in the same batch that does not carry "
                    f"the whole row; run the query with a smaller maxChangesPerTrigger so that "
                    f"the key change starts a batch"
                )
            rows[tuple(state.values.get(c) for c in key_columns)] = state
        self.rows = rows
        if self.versions:
            raise MirrorChangeError(
                f"table {self.name}: its primary key changed mid-batch; an SCD type 2 mirror "
                f"cannot re-key the versions before it"
            )

    def column_types(self) -> dict[str, str]:
        """Every column's Spark SQL type: the stream's, else inferred from the values.

        Columns are in source order (the types' order, then first appearance); a column seen
        only with nulls and no type is ``string``.
        """
        types: dict[str, str | None] = dict.fromkeys(self.key_columns)
        types.update(self.explicit_types)
        for state in self.rows.values():
            for column, value in (state.values or {}).items():
                if column not in self.explicit_types:
                    types[column] = widen(types.get(column), infer_type(value))
        for key_index, column in enumerate(self.key_columns):
            if types[column] is None and column not in self.explicit_types:
                for key in self.rows:
                    types[column] = widen(types[column], infer_type(key[key_index]))
        return {name: kind or "string" for name, kind in types.items()}

    def to_arrow(self, schema: pa.Schema) -> pa.Table:
        """The folded rows as an Arrow table of ``schema`` plus :data:`META_COLUMNS`.

        ``schema`` is the mirror's schema for this batch (every column, typed). Runs on the
        driver, once per table per batch.

        Raises
        ------
        MirrorChangeError
            A value that does not fit its column's type.
        """
        rendered: list[tuple[tuple[Any, ...], RowState, str, dict[str, Any]]] = [
            (key, state, "delete" if state.values is None else "upsert", {})
            for key, state in self.rows.items()
        ]
        return self._render(schema, rendered)

    def history_arrow(self, schema: pa.Schema) -> pa.Table:
        """SCD type 2: every row version of the batch, plus a ``close`` row per key.

        ``schema`` holds the data columns and :data:`START_AT` / :data:`END_AT`. A key's
        ``close`` row carries the time its stored current version ends (its first change in the
        batch); each ``version`` row is valid from its change until the key's next change (null:
        still current). Runs on the driver, once per table per batch.
        """
        sequences: dict[tuple[Any, ...], list[tuple[RowState, Any]]] = {}
        for key, state, at in self.versions:
            sequences.setdefault(key, []).append((state, at))
        rendered: list[tuple[tuple[Any, ...], RowState, str, dict[str, Any]]] = []
        for key, sequence in sequences.items():
            rendered.append((key, RowState(None), "close", {START_AT: sequence[0][1]}))
            for index, (state, at) in enumerate(sequence):
                if state.values is None:
                    continue  # a delete only ends the version before it
                end = sequence[index + 1][1] if index + 1 < len(sequence) else None
                rendered.append((key, state, "version", {START_AT: at, END_AT: end}))
        return self._render(schema, rendered)

    def _render(
        self,
        schema: pa.Schema,
        rendered: list[tuple[tuple[Any, ...], RowState, str, dict[str, Any]]],
    ) -> pa.Table:
        names = schema.names
        columns: dict[str, list[Any]] = {name: [] for name in names}
        actions: list[str] = []
        missing: list[list[str] | None] = []
        from_keys: list[str | None] = []
        key_index = {column: i for i, column in enumerate(self.key_columns)}
        for key, state, action, extra in rendered:
            values = state.values
            for name in names:
                if name in key_index:
                    columns[name].append(key[key_index[name]])
                elif name in extra or name in (START_AT, END_AT):
                    columns[name].append(extra.get(name))
                else:
                    columns[name].append(None if values is None else values.get(name))
            actions.append(action)
            if values is None or state.given is None:
                missing.append(None)
            else:
                skip = (START_AT, END_AT)
                absent = [n for n in names if n not in state.given and n not in skip]
                missing.append(absent or None)
            from_keys.append(None if state.from_key is None else json.dumps(list(state.from_key)))
        arrays = [to_arrow(columns[f.name], f.type, self.name, f.name) for f in schema]
        arrays += [
            pa.array(actions, pa.string()),
            pa.array(missing, pa.list_(pa.string())),
            pa.array(from_keys, pa.string()),
        ]
        return pa.Table.from_arrays(arrays, schema=empty_folded(schema).schema)


def empty_folded(schema: pa.Schema) -> pa.Table:
    """No rows: what a batch that only truncated a table applies after emptying it."""
    fields = [
        *schema,
        pa.field(ACTION, pa.string()),
        pa.field(MISSING, pa.list_(pa.string())),
        pa.field(FROM_KEY, pa.string()),
    ]
    return pa.schema(fields).empty_table()


def _parse(text: str | None, what: str, table: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        raise MirrorChangeError(
            f"table {table}: the change's {what} is not JSON: {text[:80]!r}"
        ) from e


def _key_of(table: FoldedTable, key: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(key[column] for column in table.key_columns)


def _fold_one(
    folded: FoldedTable,
    op: str,
    key: Mapping[str, Any],
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
) -> list[tuple[Any, ...]]:
    """Fold one change into ``folded``; return the keys it changed (an old key first)."""
    rows = folded.rows
    k = _key_of(folded, key)
    if op == OP_DELETE:
        rows.pop(k, None)
        rows[k] = RowState(None)
        return [k]
    if after is None:
        raise MirrorChangeError(
            f"table {folded.name}: a change with op={op!r} has no 'after' image for key {dict(key)}"
        )
    if op in (OP_CREATE, OP_READ):
        rows.pop(k, None)
        rows[k] = RowState(dict(after))
        return [k]
    # An update: merged over the batch's state of the row it came from.
    old = k
    if before is not None and all(c in before for c in folded.key_columns):
        old = tuple(before[c] for c in folded.key_columns)
    previous = rows.get(old)
    given = frozenset(after)
    if previous is not None and previous.values is not None:
        values = {**previous.values, **after}
        merged = None if previous.given is None else previous.given | given
        # Columns still missing come from the stored row the key had before this batch.
        source = previous.from_key
        if source is None and merged is not None and old != k:
            source = old
        state = RowState(values, merged, source)
    else:
        state = RowState(dict(after), given, old if old != k else None)
    if old != k:
        rows.pop(old, None)
        rows[old] = RowState(None)
    rows.pop(k, None)
    rows[k] = state
    return [old, k] if old != k else [k]


def _schema_event(table: str, before: str | None, after: str | None) -> SchemaEvent:
    try:
        return SchemaEvent.from_row(table, before, after)
    except StateFormatError as e:
        raise MirrorChangeError(str(e)) from e


def row_position(ordered: pa.Table, index: int) -> str:
    """Where row ``index`` is in the source, for errors: its transaction and commit time."""
    txn = ordered.column("txn_id")[index].as_py()
    return f"transaction {txn} (committed {ordered.column('commit_ts')[index].as_py()})"


def fold_changes(
    changes: pa.Table,
    history: bool = False,
    keeps_schema: Callable[[str], bool] = lambda table: False,
) -> dict[str, FoldedTable]:
    """Fold a batch's change rows (the ``txn-cdc`` schema) per table (driver, per batch).

    With ``history`` (SCD type 2) every state a key goes through is kept too, with its
    change's ``commit_ts``. The rows of a table for which ``keeps_schema`` is true (its mirror
    ignores schema changes) are not carried over to a new schema: each keeps the columns it
    was written with.

    Raises
    ------
    MirrorChangeError
        A change without a key, key columns that differ within a table, an unknown ``op``, or
        JSON that does not parse.
    """
    import pyarrow.compute as pc  # lazily: 0.1 s per process, unused by append commits

    order = pc.sort_indices(changes, sort_keys=[(column, "ascending") for column in ORDER])
    ordered = changes.take(order)
    has_types = TYPES_COLUMN in ordered.column_names
    columns = ["table", "op", "key", "before", "after"] + ([TYPES_COLUMN] if has_types else [])
    lists = [ordered.column(c).to_pylist() for c in columns]
    if not has_types:
        lists.append([None] * ordered.num_rows)
    times = ordered.column("commit_ts").to_pylist() if history else [None] * ordered.num_rows
    lists.append(times)
    folded: dict[str, FoldedTable] = {}
    type_cache: dict[str, dict[str, str]] = {}
    for index, (table, op, key_text, before_text, after_text, types_text, at) in enumerate(
        zip(*lists, strict=True)
    ):
        if op == SCHEMA_CHANGE_OP:
            event = _schema_event(table, before_text, after_text)
            current = folded.get(table)
            if current is None:
                current = folded[table] = FoldedTable(table, event.after.key)
            if not keeps_schema(table):
                current.follow_schema(event)
            current.schema_events.append((event, row_position(ordered, index)))
            current.changes += 1
            continue
        if op == "t":
            if history:
                raise MirrorChangeError(
                    f"table {table}: a TRUNCATE cannot be kept as history (scd=2); replay the "
                    f"table into a new mirror, or mirror it with scd=1"
                )
            current = folded.get(table)
            if current is not None:
                current.rows.clear()
                current.truncated = True
                current.changes += 1
            else:
                folded[table] = FoldedTable(table, (), truncated=True, changes=1)
            continue
        if op not in DATA_OPS:
            raise MirrorChangeError(f"table {table}: unknown change op {op!r}")
        key = _parse(key_text, "key", table)
        if not isinstance(key, dict) or not key:
            raise MirrorChangeError(
                f"table {table}: a change has no primary key (key={key_text!r}); a mirror "
                f"upserts by key. Give the source table a primary key (for PostgreSQL, or "
                f"REPLICA IDENTITY FULL with a key the connector reports); for a debezium-json "
                f"log whose lines carry no key (object-store sinks keep record values only), "
                f"name the table's key columns with the source option keyColumns "
                f"('{table}:<column>[,<column>...]'); or write this table as a change log only"
            )
        current = folded.get(table)
        if current is None:
            current = folded[table] = FoldedTable(table, tuple(key))
        elif not current.key_columns:
            current.key_columns = tuple(key)  # the first row after a truncate or schema change
        elif tuple(key) != current.key_columns:
            raise MirrorChangeError(
                f"table {table}: its changes name different key columns "
                f"({', '.join(current.key_columns)} and {', '.join(key)}) in one batch"
            )
        if types_text is not None:
            types = type_cache.get(types_text)
            if types is None:
                types = type_cache[types_text] = dict(_parse(types_text, TYPES_COLUMN, table))
            current.explicit_types.update(types)
        touched = _fold_one(
            current,
            op,
            key,
            _parse(before_text, "before", table),
            _parse(after_text, "after", table),
        )
        if history:
            current.versions += [(k, current.rows[k], at) for k in touched]
        current.changes += 1
    return folded
