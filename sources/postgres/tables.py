"""The captured tables: checked before anything is read, and rendered like wal2json renders rows.

A table can be captured when it exists and its updates and deletes identify the row: a primary
key (replica identity ``default``), a replica identity index, or replica identity ``full``.
Snapshot rows must look exactly like streamed rows, so each column is fetched as PostgreSQL's text
and typed by the same rules wal2json applies (numbers and booleans bare, everything else text),
then normalised by :func:`~spark_ckpt.sources.postgres.values.normalize_value`. Driver only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from spark_ckpt.errors import TableCaptureError

from .connect import connect
from .values import NumberText, normalize_value

__all__ = [
    "FLOAT_TYPES",
    "INTEGER_TYPES",
    "TableInfo",
    "TypeNames",
    "describe_tables",
    "parse_text_value",
]

INTEGER_TYPES = frozenset({"smallint", "integer", "bigint", "oid"})
"""Column types whose values are JSON integers (``format_type`` spelling)."""
FLOAT_TYPES = frozenset({"real", "double precision"})
"""Column types whose values are JSON floats (NaN and the infinities as strings)."""


@dataclass(frozen=True)
class TableInfo:
    """A captured table.

    Attributes
    ----------
    name
        ``schema.table``.
    schema, table
        The two parts, unquoted.
    columns
        ``(name, type)`` in column order, types as ``format_type`` spells them (as wal2json).
    key
        The primary key columns in the key's order (empty with replica identity ``full`` and
        no primary key).
    """

    name: str
    schema: str
    table: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]

    @property
    def key_in_column_order(self) -> tuple[str, ...]:
        """The key columns in table column order: how wal2json orders a change's ``key``.

        Every path renders ``key`` in this order (snapshot, wal2json, pgoutput), so a key's
        text is the same whichever path produced it.
        """
        return tuple(name for name, _ in self.columns if name in self.key)

    def select_text(self) -> sql.Composed:
        """``SELECT col::text, ... FROM schema.table`` (for the snapshot)."""
        fields = sql.SQL(", ").join(
            sql.SQL("{}::text").format(sql.Identifier(name)) for name, _ in self.columns
        )
        return sql.SQL("SELECT {} FROM {}.{}").format(
            fields, sql.Identifier(self.schema), sql.Identifier(self.table)
        )


def parse_text_value(type_name: str, text: str | None) -> Any:
    """A column's text output -> the value as decoded from wal2json, then normalised."""
    if text is None:
        return None
    value: Any = text
    if type_name in INTEGER_TYPES:
        value = int(text)
    elif type_name in FLOAT_TYPES or type_name.startswith(("numeric", "decimal")):
        value = NumberText(text)
    elif type_name == "boolean":
        value = text in ("t", "true")  # boolean::text spells it out; the output function does not
    return normalize_value(type_name, value)


def _split(name: str) -> tuple[str, str]:
    schema, dot, table = name.partition(".")
    if not dot or not schema or not table:
        raise TableCaptureError(
            f"option 'tables' has the entry {name!r}: write every table as schema.table "
            f"(public.orders)"
        )
    return schema, table


def describe_tables(conn: psycopg.Connection[Any], names: Sequence[str]) -> list[TableInfo]:
    """Look the tables up and check each can be captured.

    Raises
    ------
    TableCaptureError
        For a table that does not exist or whose updates and deletes would not say which row
        they changed (no primary key and replica identity ``default`` or ``nothing``).
    """
    infos = []
    for name in names:
        schema, table = _split(name)
        row = conn.execute(
            "SELECT c.oid, c.relreplident FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s "
            "AND c.relkind IN ('r', 'p')",
            (schema, table),
        ).fetchone()
        if row is None:
            raise TableCaptureError(
                f"table {name} (option 'tables') does not exist in the database the option 'dsn' "
                f"connects to"
            )
        oid, identity = row
        columns = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (oid,),
        ).fetchall()
        key = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND i.indisprimary "
            "ORDER BY array_position(i.indkey, a.attnum)",
            (oid,),
        ).fetchall()
        if identity == "n" or (identity == "d" and not key):
            raise TableCaptureError(
                f"table {name} has no primary key and replica identity "
                f"{'nothing' if identity == 'n' else 'default'}: its updates and deletes would "
                f"not say which row changed. Add a primary key, or run ALTER TABLE {name} "
                f"REPLICA IDENTITY FULL"
            )
        infos.append(
            TableInfo(
                name,
                schema,
                table,
                tuple((str(a), str(t)) for a, t in columns),
                tuple(str(k[0]) for k in key),
            )
        )
    return infos


class TypeNames:
    """``format_type`` names of pgoutput's column types, looked up in the catalog (driver).

    pgoutput describes a column by type oid and modifier; the ``column_types`` column wants the
    name ``format_type`` gives (as wal2json writes it). Asked while the slot's connection
    streams a peek, so it queries on a connection of its own, once per new pair.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._names: dict[tuple[int, int], str] = {}
        self._conn: psycopg.Connection[Any] | None = None

    def __call__(self, oid: int, typmod: int) -> str:
        """The type's name (``unknown`` when the catalog has none)."""
        name = self._names.get((oid, typmod))
        if name is None:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.dsn)
            row = self._conn.execute(
                "SELECT format_type(%s::oid, %s::int)", (oid, typmod)
            ).fetchone()
            name = self._names[(oid, typmod)] = str(row[0]) if row else "unknown"
        return name

    def close(self) -> None:
        """Close its connection (driver, at the connector's stop)."""
        if self._conn is not None:
            self._conn.close()
