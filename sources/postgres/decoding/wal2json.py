"""Decoding wal2json ``format-version 2`` output into whole PostgreSQL transactions.

``pg_logical_slot_peek_changes(slot, upto_lsn, upto_nchanges, 'format-version', '2', ...)`` yields
one row per action: ``B`` (begin), ``I`` / ``U`` / ``D`` (insert, update, delete with ``schema``,
``table``, ``columns`` and, for updates and deletes, ``identity``), ``T`` (truncate: carried as a
change with ``op='t'``), ``M`` (logical message) and ``C`` (commit, with ``lsn`` and
``nextlsn``). Decoding delivers committed transactions whole and in commit order, so grouping is
a matter of reading ``B .. C`` (driver, :func:`decode_transactions`); row changes stay JSON text
until executors decode them with the one production decoder, the native one
(:mod:`.wal2json_columns`). Format reference: wal2json's README, "format-version 2"
(https://github.com/eulerto/wal2json#format-2). No database access.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from spark_ckpt.errors import ChangeDecodeError
from spark_ckpt.model.schema_changes import SchemaEvent, TableSchema

from ..lsn import parse_lsn
from ..values import timestamp_micros
from .relations import Relation, RelationCatalog
from .transactions import ChangeColumns, PgTransaction
from .wal2json_columns import decode_changes, decode_column_types

if TYPE_CHECKING:
    from ...change_store import ChangeStore
    from ..schema_tracking import SchemaTracker

__all__ = [
    "PLUGIN_OPTIONS",
    "WAL2JSON",
    "Wal2Json",
    "Wal2JsonWatcher",
    "add_tables",
    "decode_transactions",
    "schema_change_row",
]

PLUGIN_OPTIONS: tuple[str, ...] = (
    "format-version",
    "2",
    "include-xids",
    "1",
    "include-timestamp",
    "1",
    "include-lsn",
    "1",
    "include-pk",
    "1",
    "include-types",
    "1",
    "include-transaction",
    "1",
)
"""wal2json options the connector decodes with (``name, value`` pairs, flattened)."""

_OPS = {"I": "c", "U": "u", "D": "d"}
_FIELDS = {
    name: re.compile(rf'"{name}":"?([^",}}]*)')  # B and C rows hold plain numbers and strings
    for name in ("xid", "lsn", "nextlsn", "timestamp")
}


def _field(data: str, name: str) -> str:
    # B and C rows are parsed once per transaction on the driver: a regex beats json.loads.
    match = _FIELDS[name].search(data)
    if match is None:
        raise ChangeDecodeError(f"wal2json row without {name!r}: {data[:200]}")
    return match.group(1)


def schema_change_row(event: SchemaEvent) -> str:
    """A schema change as a row of the change store: ``{"action":"S", ...}`` (not wal2json's)."""
    schema, _, table = event.table.partition(".")
    return json.dumps(
        {
            "action": "S",
            "schema": schema,
            "table": table,
            "before": event.before_json(),
            "after": event.after_json(),
        },
        separators=(",", ":"),
    )


def decode_transactions(
    rows: Iterable[tuple[str, int | None, str]],
    tables: frozenset[str] | None = None,
    store: ChangeStore | None = None,
    start_lsn: int = 0,
    watcher: Wal2JsonWatcher | None = None,
) -> Iterator[PgTransaction]:
    """Group peeked ``(lsn, xid, data)`` rows into committed transactions (driver).

    Only the small ``B``, ``C`` and ``T`` rows are parsed here; row changes stay JSON text
    (``PgTransaction.changes``) for :func:`.wal2json_columns.decode_changes` on the executors,
    so the driver's cost per change is a prefix test. Which tables are captured is wal2json's
    ``add-tables`` filter. A trailing transaction without its ``C`` row (the peek stopped
    inside it) is not yielded. A logical decoding message outside any transaction (a heartbeat)
    is yielded as an empty transaction at its LSN: a position the slot may be confirmed up to.

    Parameters
    ----------
    rows
        Rows of ``pg_logical_slot_peek_changes`` decoded with :data:`PLUGIN_OPTIONS`.
    tables
        The captured ``schema.table`` names (a TRUNCATE of one is kept as its change, op
        ``t``); None: all.
    store
        Where the transactions' changes go (None: their own lists).
    start_lsn
        Transactions that committed before it were delivered already (the slot's confirmed
        position lags the query's offset): they are yielded with their size but their changes
        are not kept.
    watcher
        Schema changes: the row a watcher gives for an insert or update goes before it, and
        each transaction records the watcher's schemas as of its end.
    """
    current: PgTransaction | None = None
    for lsn, _xid, data in rows:
        # format-version 2 rows all begin with {"action":"X"
        action = data[11:12] if data.startswith('{"action":"') else ""
        if action in _OPS:
            if current is not None:  # else the peek began inside it: re-read whole later
                if watcher is not None and action != "D" and not current.delivered:
                    event = watcher.schema_change(data, action)
                    if event is not None:
                        current.add(schema_change_row(event))
                        current.schema_changed(event)
                current.add(data)
        elif action == "B":
            current = PgTransaction(int(_field(data, "xid")), 0, 0, None, store=store)
            # B rows carry the commit's LSN (wal2json decodes a transaction at its commit).
            current.delivered = parse_lsn(_field(data, "lsn")) < start_lsn
        elif action == "C":
            if current is None:
                continue
            current.commit_lsn = parse_lsn(_field(data, "lsn"))
            current.end_lsn = parse_lsn(_field(data, "nextlsn"))
            current.commit_ts_us = timestamp_micros(_field(data, "timestamp"))
            if watcher is not None:
                current.schemas = watcher.state
            yield current
            current = None
        elif action == "T":
            # One row per truncated table: carried as a change (op 't') of the captured ones.
            body = json.loads(data)
            table = f"{body.get('schema')}.{body.get('table')}"
            if current is not None and (tables is None or table in tables):
                current.add(data)
        elif action == "M" and current is None:
            # A message outside any transaction (a heartbeat): decoding got this far with
            # nothing for the captured tables in between, so it is a position to confirm.
            position = parse_lsn(lsn)
            yield PgTransaction(0, position, position, None)
        # Messages inside a transaction carry no row changes.


class Wal2JsonWatcher:
    """Finds schema changes in the wal2json changes of the ``watch`` tables (driver, per peek).

    Only tables whose catalog differs from the known schema are watched
    (:func:`~..schema_tracking.drifted`):
    parsing every change would cost the driver more than all its other work per change.
    """

    def __init__(self, tracker: SchemaTracker, watch: frozenset[str]) -> None:
        self.tracker = tracker
        self.watch = watch

    @property
    def state(self) -> Mapping[str, TableSchema]:
        """Each table's schema as of the last change watched."""
        return self.tracker.state

    def schema_change(self, data: str, action: str) -> SchemaEvent | None:
        """The schema change an insert or update shows before it, if any."""
        if not self.watch:
            return None
        return _watched_change(data, action, self.tracker, self.watch)


def _watched_change(
    data: str, action: str, tracker: SchemaTracker, watch: frozenset[str]
) -> SchemaEvent | None:
    body = json.loads(data)
    table = f"{body.get('schema')}.{body.get('table')}"
    if table not in watch:
        return None
    columns = tuple((str(c["name"]), str(c.get("type", ""))) for c in body.get("columns") or ())
    names = [name for name, _ in columns]
    pk = {str(k["name"]) for k in body.get("pk") or ()}
    key = tuple(name for name in names if name in pk)  # in column order, as the catalog's
    if action == "I":
        return tracker.observe(table, columns, key)
    return tracker.observe_partial(table, columns, key)


def add_tables(tables: Sequence[str]) -> str:
    r"""wal2json's ``add-tables`` filter: ``schema.table`` names, ``,.*\`` and spaces escaped."""

    def escape(part: str) -> str:
        return "".join("\\" + c if c in ",.*\\ " else c for c in part)

    return ",".join(
        f"{escape(schema)}.{escape(table)}"
        for schema, _, table in (name.partition(".") for name in tables)
    )


class Wal2Json:
    """wal2json as an :class:`~.plugin.OutputPlugin`: JSON text, filtered by ``add-tables``."""

    name = "wal2json"
    binary = False
    peek_function = "pg_logical_slot_peek_changes"

    def peek_options(self, tables: Sequence[str], publication: str | None) -> list[str]:
        """The peek's options: the captured tables only (driver, per peek)."""
        return [*PLUGIN_OPTIONS, "add-tables", add_tables(tables)]

    def transactions(
        self,
        rows: Iterable[tuple[str, int | None, str]],
        relations: RelationCatalog,
        tables: frozenset[str],
        store: ChangeStore,
        start_lsn: int,
        tracker: SchemaTracker | None,
        watch: frozenset[str],
    ) -> Iterator[PgTransaction]:
        """:func:`decode_transactions`, schema changes watched in ``watch`` (driver, per peek)."""
        watcher = None if tracker is None else Wal2JsonWatcher(tracker, watch)
        return decode_transactions(rows, tables, store, start_lsn, watcher)

    def render(
        self, changes: pa.Array, relation_of: pa.Array | None, relations: Sequence[Relation]
    ) -> ChangeColumns:
        """:func:`.wal2json_columns.decode_changes` (executors and the driver's windows)."""
        return decode_changes(changes)

    def column_types(
        self, changes: pa.Array, relation_of: pa.Array | None, relations: Sequence[Relation]
    ) -> pa.Array:
        """:func:`.wal2json_columns.decode_column_types` (executor, per chunk)."""
        return decode_column_types(changes)


WAL2JSON = Wal2Json()
"""The plugin (stateless)."""
