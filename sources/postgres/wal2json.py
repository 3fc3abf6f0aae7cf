"""Decoding wal2json ``format-version 2`` output into whole PostgreSQL transactions.

``pg_logical_slot_peek_changes(slot, upto_lsn, upto_nchanges, 'format-version', '2', ...)`` yields
one row per action: ``B`` (begin), ``I`` / ``U`` / ``D`` (insert, update, delete with ``schema``,
``table``, ``columns`` and, for updates and deletes, ``identity``), ``T`` (truncate: carried as a
change with ``op='t'``), ``M``
(logical message) and ``C`` (commit, with ``lsn`` and ``nextlsn``). Decoding delivers committed
transactions whole and in commit order, so grouping is a matter of reading ``B .. C``.

Values keep full precision: wal2json prints ``numeric`` as a bare JSON number, which a float
would round, so numbers are kept as their text (:class:`NumberText`) and ``numeric`` columns are
emitted as JSON strings with every digit (Debezium's ``decimal.handling.mode=string``); floats
stay numbers; NaN and infinities become strings (JSON has no literal for them); timestamps,
text, ``bytea`` and arrays are PostgreSQL's text form. Pure Python, no database access.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from spark_ckpt.errors import ChangeDecodeError
from spark_ckpt.model.schema_changes import SchemaEvent, TableSchema

from .lsn import parse_lsn

if TYPE_CHECKING:
    from .change_store import ChangeStore

__all__ = [
    "PLUGIN_OPTIONS",
    "NumberText",
    "PgChange",
    "PgTransaction",
    "SchemaWatcher",
    "decode_change",
    "decode_transactions",
    "normalize_value",
    "schema_change_row",
    "timestamp_micros",
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
_NUMERIC_TYPES = ("numeric", "decimal")
_FLOATS = frozenset({"real", "double precision"})
_BARE_HEX = re.compile(r"[0-9a-f]*")
_EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")


@dataclass(frozen=True)
class PgChange:
    """One row change: ``op`` in ``c``, ``u``, ``d`` (``r`` for snapshot reads)."""

    op: str
    table: str
    key: dict[str, Any] | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass
class PgTransaction:
    """One committed transaction of the captured tables.

    Attributes
    ----------
    xid
        The transaction id.
    commit_lsn
        LSN of the commit record.
    end_lsn
        LSN just after the commit record: the position to resume (and confirm the slot) after it.
    commit_ts_us
        Commit time in microseconds since the epoch.
    changes
        Row changes of the captured tables in the transaction's order, as the plugin sent them:
        wal2json's JSON text (:func:`decode_change` parses one) or pgoutput's messages (bytes);
        empty when the transaction touched other tables only.
        With a ``store`` they go there instead, and this stays empty.
    relations
        pgoutput only: per change, the index of its relation in the stream's
        :class:`~.pgoutput.RelationCatalog`.
    size
        Number of changes.
    first
        With a ``store``: the position of the first change in it.
    store
        Where the changes go (:class:`~.change_store.ChangeStore`); None: :attr:`changes`.
    """

    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int | None
    changes: list[Any] = field(default_factory=list)
    relations: list[int] = field(default_factory=list)
    size: int = 0
    first: int = 0
    store: ChangeStore | None = field(default=None, compare=False, repr=False)
    delivered: bool = field(default=False, compare=False, repr=False)
    """Committed before the peek's start: its changes are counted, not kept."""
    schemas: Mapping[str, TableSchema] | None = field(default=None, compare=False, repr=False)
    """The captured tables' schemas as of the transaction's end, where tracked."""
    schema_changes: list[str] = field(default_factory=list, compare=False, repr=False)
    """Its schema changes, described (``public.orders: column_renamed name -> title``)."""
    rebuilds: list[str] = field(default_factory=list, compare=False, repr=False)
    """Tables whose schema change begins a new read of them (``rebuild='begin'``)."""

    def schema_changed(self, event: SchemaEvent) -> None:
        """Note a schema change the transaction holds (driver, per schema change)."""
        self.schema_changes.append(event.summary())
        if event.rebuild == "begin":
            self.rebuilds.append(event.table)

    def add(self, data: Any, relation: int | None = None) -> None:
        """Count a change and keep it (driver, per change): in the store, or :attr:`changes`."""
        self.size += 1
        if self.delivered:
            return
        if self.store is not None:
            position = self.store.append(data, relation)
            if self.size == 1:
                self.first = position
        else:
            self.changes.append(data)
            if relation is not None:
                self.relations.append(relation)


def timestamp_micros(text: str | None) -> int | None:
    """PostgreSQL's ``timestamp with time zone`` text -> microseconds since the epoch."""
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _constant(name: str) -> str:
    return name  # NaN, Infinity, -Infinity: no JSON literal; keep PostgreSQL's spelling


class NumberText(str):
    """A JSON number with a fraction or exponent, kept as the text it was printed as."""

    __slots__ = ()


def normalize_value(type_name: str, value: Any) -> Any:
    """A column value as wal2json printed it -> a JSON value with no precision lost.

    Numbers with a fraction arrive as :class:`NumberText` (``json.loads(parse_float=...)``), so
    nothing is rounded before the column type decides: ``numeric`` keeps the exact text,
    ``real`` / ``double precision`` become floats (the shortest text round-trips exactly).
    """
    if value is None:
        return None
    if type_name == "bytea" and isinstance(value, str) and _BARE_HEX.fullmatch(value):
        return "\\x" + value  # wal2json prints bare hex; PostgreSQL's text form has \x
    if type_name.startswith(_NUMERIC_TYPES):
        return str(value)  # every digit as printed (PostgreSQL never uses exponents for numeric)
    if isinstance(value, NumberText) or (isinstance(value, int) and type_name in _FLOATS):
        number = float(value)
        # NaN, Infinity, -Infinity have no JSON literal: keep PostgreSQL's spelling.
        return number if math.isfinite(number) else str(value)
    return value


def _columns(items: Iterable[dict[str, Any]] | None) -> dict[str, Any] | None:
    if items is None:
        return None
    return {
        item["name"]: normalize_value(item.get("type", ""), item.get("value")) for item in items
    }


def _change(action: str, body: dict[str, Any]) -> PgChange:
    table = f"{body['schema']}.{body['table']}"
    if action == "T":
        return PgChange("t", table, None, None, None)
    after = _columns(body.get("columns")) if action != "D" else None
    before = _columns(body.get("identity")) if action != "I" else None
    pk_names = [item["name"] for item in body.get("pk") or []]
    image = after if after is not None else before
    key = None
    if pk_names and image is not None:
        key = {name: image.get(name) for name in pk_names}
    return PgChange(_OPS[action], table, key, before, after)


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


def _integer(text: str) -> int | NumberText:
    # A float column's -0 is printed "-0", which int() would turn into 0: keep the sign.
    return NumberText(text) if text == "-0" else int(text)


def decode_change(data: str) -> PgChange:
    """One ``I`` / ``U`` / ``D`` / ``T`` row's data -> the change, values normalised (executor)."""
    try:
        body = json.loads(
            data, parse_float=NumberText, parse_int=_integer, parse_constant=_constant
        )
        action = body["action"]
    except (ValueError, KeyError, TypeError) as e:
        raise ChangeDecodeError(f"a wal2json row that is not a row change: {data[:200]!r}") from e
    return _change(action, body)


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


class SchemaWatcher(Protocol):
    """Finds schema changes in wal2json's row changes (:mod:`.schema_tracking` has the one)."""

    @property
    def state(self) -> Mapping[str, TableSchema]:
        """Each table's schema as of the last change watched."""

    def schema_change(self, data: str, action: str) -> SchemaEvent | None:
        """The schema change an insert or update shows before it, if any."""


def decode_transactions(
    rows: Iterable[tuple[str, int | None, str]],
    tables: frozenset[str] | None = None,
    store: ChangeStore | None = None,
    start_lsn: int = 0,
    watcher: SchemaWatcher | None = None,
) -> Iterator[PgTransaction]:
    """Group peeked ``(lsn, xid, data)`` rows into committed transactions (driver).

    Only the small ``B``, ``C`` and ``T`` rows are parsed here; row changes stay JSON text
    (``PgTransaction.changes``) for :func:`decode_change` on the executors, so the driver's
    cost per change is a prefix test. Which tables are captured is wal2json's ``add-tables``
    filter. A trailing transaction without its ``C`` row (the peek stopped inside it) is not
    yielded. A logical decoding message outside any transaction (a heartbeat) is yielded as an
    empty transaction at its LSN: a position the slot may be confirmed up to.

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
