"""Schema changes of the captured tables, found in the stream and described from the catalog.

Logical decoding carries no DDL. pgoutput describes a relation (``R``) before its first change in
each decoding call and again after its schema changed; wal2json names each change's columns and
their types. :class:`SchemaTracker` compares each description with the schema the stream last
delivered for the table (kept in the offset, so a restarted query knows it) and, when they
differ, asks the catalog what the stream does not say:

- each column's ``attnum``, which survives a rename: a rename is told from a drop and an add;
- ``attmissingval`` (PostgreSQL 11+): the value existing rows read for a column added with a
  non-volatile default, without a table rewrite;
- a changed ``relfilenode``: the table was rewritten, so an added column whose default is not in
  ``attmissingval`` got its default's value in existing rows then: known when the default calls
  immutable functions only (evaluated again), unknown otherwise (``now()``, ``random()``);
- ``attnotnull`` and the primary key.

The catalog answers as of now, not as of the change's position: a column renamed twice between
two peeks is found under its newest name (matched by position then, see :func:`_resolve`).
A table's new schema becomes visible with its first change after the DDL (PostgreSQL sends the
relation then), so a DDL with no change after it waits for one. Driver only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg

from spark_ckpt.model.schema_changes import (
    ColumnSchema,
    SchemaEvent,
    TableSchema,
    diff_schemas,
    rebuild_reason,
)

from .connect import connect
from .tables import parse_text_value
from .types import spark_type

__all__ = [
    "CatalogColumns",
    "SchemaCatalog",
    "SchemaTracker",
    "catalog_schema",
    "drifted",
    "relation_schema",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CatalogColumns:
    """A table as the catalog describes it now.

    Attributes
    ----------
    columns
        ``(attnum, name, format_type, not null, missing value text or None, has default)`` for
        each live column, in ``attnum`` order.
    key
        The primary key's columns, in column order.
    storage
        The table's ``relfilenode`` (a rewrite changes it).
    rewrite_defaults
        ``attnum`` -> the text of the column's default (None: NULL), for columns without a
        missing value whose default calls immutable functions only: the value a table rewrite
        gave existing rows, whenever it ran. A default that calls a stable or volatile function
        (``now()``, ``random()``, a sequence) is not here: its values are not known.
    """

    columns: tuple[tuple[int, str, str, bool, str | None, bool], ...]
    key: tuple[str, ...]
    storage: str
    rewrite_defaults: Mapping[int, str | None] = field(default_factory=dict)
    version: str = ""
    """A digest of the table's columns (``attnum``, name, type, dropped or not): a column
    added, retyped or renamed changes it, even when undone since (added, then dropped)."""


_COLUMNS_SQL = (
    "SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
    "CASE WHEN a.atthasmissing THEN a.attmissingval::text END, a.atthasdef "
    "FROM pg_attribute a WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped "
    "ORDER BY a.attnum"
)
_VERSION = (
    "md5(string_agg(concat_ws(':', a.attnum, a.attname, a.atttypid, a.atttypmod, "
    "a.attisdropped), ',' ORDER BY a.attnum))"
)
"""A table's definition version: its columns' numbers, names and types, dropped ones included
(not the rows' ``xmin``: ``SET STORAGE`` or ``SET STATISTICS`` would change that forever)."""
_DEFAULTS_SQL = (
    "SELECT d.adnum, pg_get_expr(d.adbin, d.adrelid), d.adbin::text FROM pg_attrdef d "
    "JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum "
    "WHERE d.adrelid = %s AND NOT a.atthasmissing AND NOT a.attisdropped"
)
_FUNCTIONS = re.compile(r":(?:funcid|opfuncid) (\d+)")
"""Functions a default's expression tree (``pg_node_tree`` text) calls."""
_KEY_SQL = (
    "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
    "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary ORDER BY a.attnum"
)
_OID_SQL = (
    "SELECT c.oid, c.relfilenode FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %s AND c.relname = %s"
)


class SchemaCatalog:
    """Describes captured tables from the catalog, on a connection of its own (driver).

    Asked while the slot's connection streams a peek, so it cannot use that one.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.dsn, autocommit=True)
        return self._conn

    def describe(self, table: str) -> CatalogColumns | None:
        """The table ``schema.table`` now (None when it no longer exists)."""
        schema, _, name = table.partition(".")
        row = self._connection().execute(_OID_SQL, (schema, name)).fetchone()
        if row is None:
            return None
        oid, storage = row
        conn = self._connection()
        columns = conn.execute(_COLUMNS_SQL, (oid,)).fetchall()
        key = conn.execute(_KEY_SQL, (oid,)).fetchall()
        version = conn.execute(
            f"SELECT {_VERSION} FROM pg_attribute a WHERE a.attrelid = %s AND a.attnum > 0",
            (oid,),
        ).fetchone()
        return CatalogColumns(
            tuple(
                (int(n), str(a), str(t), bool(nn), None if m is None else str(m), bool(d))
                for n, a, t, nn, m, d in columns
            ),
            tuple(str(k[0]) for k in key),
            str(storage),
            self._immutable_defaults(oid),
            "" if version is None else str(version[0]),
        )

    def _immutable_defaults(self, oid: int) -> dict[int, str | None]:
        """The defaults without a missing value that call immutable functions only, evaluated.

        Evaluating such a default now gives what a rewrite gave existing rows (``ALTER ...
        TYPE`` in the transaction that added the column rewrites the table instead of keeping
        ``attmissingval``).
        """
        conn = self._connection()
        found: dict[int, str | None] = {}
        for attnum, expression, tree in conn.execute(_DEFAULTS_SQL, (oid,)).fetchall():
            functions = [int(f) for f in _FUNCTIONS.findall(str(tree))]
            if functions:
                row = conn.execute(
                    "SELECT bool_and(provolatile = 'i') FROM pg_proc WHERE oid = ANY(%s)",
                    (functions,),
                ).fetchone()
                if row is None or not row[0]:
                    continue  # now(), random(), nextval(): the values old rows got are unknown
            value = conn.execute(f"SELECT ({expression})::text").fetchone()
            found[int(attnum)] = None if value is None else value[0]
        return found

    def schema(self, table: str) -> TableSchema | None:
        """The table's schema now, with column ids (None when it does not exist)."""
        described = self.describe(table)
        return None if described is None else catalog_schema(described)

    def column_lists(
        self, tables: Iterable[str]
    ) -> dict[str, tuple[tuple[tuple[str, str], ...], str]]:
        """Each existing table's ``(name, format_type)`` columns and version now (driver).

        One query for all the tables, after every read of a wal2json slot.
        """
        rows = (
            self._connection()
            .execute(
                "SELECT n.nspname || '.' || c.relname, "
                "array_agg(a.attname::text ORDER BY a.attnum) FILTER (WHERE NOT a.attisdropped), "
                "array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY a.attnum) "
                f"FILTER (WHERE NOT a.attisdropped), {_VERSION} "
                "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname || '.' || c.relname = ANY(%s) AND a.attnum > 0 GROUP BY 1",
                (list(tables),),
            )
            .fetchall()
        )
        return {
            str(table): (tuple(zip(names, kinds, strict=True)), str(version))
            for table, names, kinds, version in rows
        }

    def close(self) -> None:
        """Close its connection (driver, at the connector's stop)."""
        if self._conn is not None:
            self._conn.close()


def relation_schema(columns: tuple[tuple[str, str], ...], key: tuple[str, ...]) -> TableSchema:
    """A schema from a relation's ``(name, format_type)`` columns alone, without ids."""
    return TableSchema(tuple(ColumnSchema(n, spark_type(t), t) for n, t in columns), key)


def catalog_schema(described: CatalogColumns) -> TableSchema:
    """The schema a catalog description gives (a stream's starting point)."""
    columns = [(name, kind) for _, name, kind, _, _, _ in described.columns]
    return _resolve(columns, described, None)


def _missing_value(type_name: str, array_text: str) -> Any:
    """The value of a one-element ``attmissingval`` array literal (``{t}``, ``{"x y"}``)."""
    inner = array_text[1:-1]
    if inner == "NULL":
        return None
    if inner.startswith('"'):
        text, escaped = [], False
        for char in inner[1:-1]:
            if escaped or char != "\\":
                text.append(char)
                escaped = False
            else:
                escaped = True
        inner = "".join(text)
    return parse_text_value(type_name, inner)


def _resolve(
    columns: list[tuple[str, str]] | tuple[tuple[str, str], ...],
    described: CatalogColumns,
    known: TableSchema | None,
) -> TableSchema:
    """The stream's columns with the catalog's ids, nullability and added columns' defaults.

    The catalog answers as of now, which may be past the stream's position: a streamed column
    it no longer has under that name was dropped or renamed since. One the known schema has
    under that name keeps its id (unchanged here, dropped later); any other takes the id of the
    first catalog column claimed by neither (renamed again since), so a rename is still found.
    """
    by_name = {c[1]: c for c in described.columns}
    old = {c.name: c for c in known.columns} if known is not None else {}
    names = {n for n, _ in columns}
    claimed: set[int | None] = {by_name[n][0] for n in names if n in by_name}
    claimed |= {old[n].id for n in names if n not in by_name and n in old}
    unmatched = [c for c in described.columns if c[0] not in claimed]
    known_ids = {c.id for c in old.values()}
    rewritten = known is not None and known.storage not in (None, described.storage)
    result = []
    for name, kind in columns:
        entry = by_name.get(name)
        if entry is None and name in old and old[name].id is not None:
            result.append(
                ColumnSchema(name, spark_type(kind), kind, old[name].nullable, old[name].id)
            )
            continue
        if entry is None:
            entry = unmatched.pop(0) if unmatched else None
        if entry is None:
            result.append(ColumnSchema(name, spark_type(kind), kind))
            continue
        attnum, _, _, not_null, missing, has_default = entry
        default, unknown = None, False
        if known is not None and attnum not in known_ids:
            if missing is not None:
                default = _missing_value(kind, missing)
            elif has_default and rewritten:
                # The table was rewritten since: old rows got the default as it evaluated then.
                if attnum in described.rewrite_defaults:
                    text = described.rewrite_defaults[attnum]
                    default = None if text is None else parse_text_value(kind, text)
                else:
                    unknown = True  # a stable or volatile default: those values are unknown
        result.append(
            ColumnSchema(name, spark_type(kind), kind, not not_null, attnum, default, unknown)
        )
    key = tuple(k for k in described.key if k in names)
    current = tuple((n, t) for _, n, t, _, _, _ in described.columns) == tuple(columns)
    version = described.version if current else None  # else the catalog is past this point
    return TableSchema(tuple(result), key, described.storage, version)


class SchemaTracker:
    """Follows the captured tables' schemas through one peek of the stream (driver).

    Parameters
    ----------
    known
        Each table's schema as of the peek's start (the start offset's); a table missing here
        takes its first description as it is, with no event (a checkpoint from before schema
        tracking).
    describe
        The catalog (:meth:`SchemaCatalog.describe`).
    rebuilds
        Mark a change a mirror cannot follow in place (:func:`~spark_ckpt.model.schema_changes.
        rebuild_reason`) of a table with a primary key as the beginning of a new read of the
        table (``rebuild='begin'``): the connector then reads it again in chunks.
    """

    def __init__(
        self,
        known: Mapping[str, TableSchema],
        describe: Callable[[str], CatalogColumns | None],
        rebuilds: bool = False,
    ) -> None:
        self.state: Mapping[str, TableSchema] = known
        """Each table's schema as of the last relation observed (replaced, never mutated)."""
        self._describe = describe
        self._rebuilds = rebuilds

    def observe(
        self, table: str, columns: tuple[tuple[str, str], ...], key: tuple[str, ...]
    ) -> SchemaEvent | None:
        """The schema change of a relation just described, if any (driver, per ``R``).

        ``columns`` are its ``(name, format_type)`` pairs, ``key`` its primary key.
        """
        known = self.state.get(table)
        if known is not None and _same(known, columns, key):
            return None
        described = self._describe(table)
        if described is None:
            current = relation_schema(columns, key)
        else:
            current = _resolve(columns, described, known)
        self.state = {**self.state, table: current.plain()}
        if known is None:
            return None
        changes = diff_schemas(known, current)
        if not changes:
            return None
        event = SchemaEvent(table, known, current, changes)
        reason = rebuild_reason(event)
        if reason is not None and self._rebuilds and current.key:
            event = replace(event, rebuild="begin")
            _log.info(
                "postgres table %s changed its schema: %s; %s, so the table is read again",
                table,
                event.describe(),
                reason,
            )
        else:
            _log.info("postgres table %s changed its schema: %s", table, event.describe())
        return event

    def observe_partial(
        self, table: str, columns: tuple[tuple[str, str], ...], key: tuple[str, ...]
    ) -> SchemaEvent | None:
        """Like :meth:`observe`, for a change that may leave columns out (driver, per change).

        A wal2json update leaves out unchanged TOASTed values, so a column it lacks may still
        exist: the catalog says which. Columns the change carries that the known schema has,
        with the same types, are no change.
        """
        known = self.state.get(table)
        if known is None:
            return None
        types = {c.name: c.source_type for c in known.columns}
        if all(types.get(name) == kind for name, kind in columns):
            return None
        described = self._describe(table)
        given = dict(columns)
        merged: list[tuple[str, str]] = []
        for _, name, kind, _, _, _ in described.columns if described is not None else ():
            if name in given:
                merged.append((name, given.pop(name)))
            elif name in types:
                merged.append((name, types[name]))  # left out (TOAST), still there
            else:
                merged.append((name, kind))  # added, and left out of this change
        merged += list(given.items())  # renamed again since: the catalog has another name
        return self.observe(table, tuple(merged), key)


def drifted(
    known: Mapping[str, TableSchema],
    now: Mapping[str, tuple[tuple[tuple[str, str], ...], str]],
) -> frozenset[str]:
    """The tables whose catalog ``now`` (columns, version) differs from the ``known`` schemas.

    A version that differs catches column DDL undone since (a column added, written and dropped
    between two reads of the slot); an unknown version (the schema was described from a catalog
    already past it) counts as a difference until the stream catches up.
    """
    found = set()
    for table, schema in known.items():
        if table not in now:
            continue
        columns, version = now[table]
        listed = tuple((c.name, c.source_type) for c in schema.columns)
        if listed != columns or schema.version != version:
            found.add(table)
    return frozenset(found)


def _same(known: TableSchema, columns: tuple[tuple[str, str], ...], key: tuple[str, ...]) -> bool:
    """Whether a description is of the schema already known (the common case: a re-send)."""
    return known.key == key and tuple((c.name, c.source_type) for c in known.columns) == columns
