"""Decoding pgoutput, PostgreSQL's built-in logical replication protocol (version 1).

``pg_logical_slot_peek_binary_changes(slot, upto_lsn, upto_nchanges, 'proto_version', '1',
'publication_names', pub, 'messages', 'true')`` yields one row per message: ``B`` (begin: xid),
``R`` (a relation: its name, columns and types, sent before its first change in each decoding
call, and again after its schema changed), ``I`` / ``U`` / ``D`` (row changes, values in
PostgreSQL's text form), ``T`` (truncate of one or more relations), ``M`` (a logical decoding
message), ``Y`` / ``O`` (types, origins: not needed) and ``C`` (commit: its LSNs and time).

The driver groups messages into transactions (:func:`decode_transactions`) and keeps the row
changes as the raw messages, each with the relation it refers to at that point of the stream
(:class:`RelationCatalog`). Executors render them (:func:`render_change`) into exactly the
output text the wal2json path and the snapshot give: values go through the snapshot's
:func:`~.tables.parse_text_value`, so NaN and infinities survive as their PostgreSQL spelling
and ``numeric`` keeps every digit. Pure Python, no database access.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_ckpt.errors import ChangeDecodeError
from spark_ckpt.model.schema_changes import SCHEMA_CHANGE_OP, SchemaEvent

from ..schema import json_text
from .lsn import parse_lsn
from .tables import parse_text_value
from .wal2json import PgTransaction

if TYPE_CHECKING:
    from .change_store import ChangeStore
    from .schema_tracking import SchemaTracker

__all__ = [
    "PLUGIN_OPTIONS",
    "Relation",
    "RelationCatalog",
    "decode_transactions",
    "render_change",
    "schema_change",
    "truncate_change",
]

PLUGIN_OPTIONS: tuple[str, ...] = ("proto_version", "1", "messages", "true")
"""pgoutput options besides ``publication_names`` (``name, value`` pairs, flattened)."""

_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 (PostgreSQL's epoch) in Unix microseconds
_U16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_ROW_CHANGES = frozenset(b"IUD")


@dataclass(frozen=True)
class Relation:
    """A relation as a ``R`` message described it, with its columns' types named.

    Attributes
    ----------
    table
        ``schema.table``.
    columns
        ``(name, type)`` in column order, types as ``format_type`` spells them (as wal2json).
    identity
        Per column: part of the replica identity (what a ``K`` old tuple holds).
    key
        The primary key's columns (the output's ``key``; empty without a primary key).
    """

    table: str
    columns: tuple[tuple[str, str], ...]
    identity: tuple[bool, ...]
    key: tuple[str, ...]


class _Cursor:
    """Reads pgoutput's big-endian fields from one message."""

    __slots__ = ("at", "data")

    def __init__(self, data: bytes, at: int = 0) -> None:
        self.data = data
        self.at = at

    def byte(self) -> int:
        value = self.data[self.at]
        self.at += 1
        return value

    def int16(self) -> int:
        (value,) = _U16.unpack_from(self.data, self.at)
        self.at += 2
        return int(value)

    def uint32(self) -> int:
        (value,) = _U32.unpack_from(self.data, self.at)
        self.at += 4
        return int(value)

    def int32(self) -> int:
        (value,) = _I32.unpack_from(self.data, self.at)
        self.at += 4
        return int(value)

    def uint64(self) -> int:
        (value,) = _U64.unpack_from(self.data, self.at)
        self.at += 8
        return int(value)

    def int64(self) -> int:
        (value,) = _I64.unpack_from(self.data, self.at)
        self.at += 8
        return int(value)

    def string(self) -> str:
        end = self.data.index(0, self.at)
        value = self.data[self.at : end].decode()
        self.at = end + 1
        return value

    def tuple_data(self) -> list[str | bool | None]:
        """``TupleData``: per column its text, None (null) or False (an unchanged TOAST value)."""
        values: list[str | bool | None] = []
        for _ in range(self.int16()):
            kind = self.byte()
            if kind == 0x74:  # 't': text
                length = self.int32()
                values.append(self.data[self.at : self.at + length].decode())
                self.at += length
            elif kind == 0x6E:  # 'n': null
                values.append(None)
            elif kind == 0x75:  # 'u': unchanged TOASTed value, not sent
                values.append(False)
            else:
                raise ChangeDecodeError(
                    f"pgoutput tuple data with column kind {kind!r} (binary mode is not used)"
                )
        return values


class RelationCatalog:
    """The relations of a stream, each schema version once (driver, across peeks).

    Parameters
    ----------
    type_name
        ``(type oid, typmod) -> format_type`` text (one catalog query per new pair).
    primary_key
        ``schema.table -> primary key column names``.
    """

    def __init__(
        self,
        type_name: Callable[[int, int], str],
        primary_key: Callable[[str], tuple[str, ...]],
    ) -> None:
        self._type_name = type_name
        self._primary_key = primary_key
        self.versions: list[Relation] = []
        self._index: dict[Relation, int] = {}
        self.current: dict[int, int] = {}
        """relation id -> index into :attr:`versions`, as of the last ``R`` message read."""

    def learn(self, data: bytes) -> Relation:
        """Read an ``R`` message: the relation's current description (returned)."""
        cursor = _Cursor(data, 1)
        relid = cursor.uint32()
        table = f"{cursor.string()}.{cursor.string()}"
        cursor.byte()  # replica identity setting: the column flags say which columns are in it
        columns, identity = [], []
        for _ in range(cursor.int16()):
            flags = cursor.byte()
            name = cursor.string()
            oid, typmod = cursor.uint32(), cursor.int32()
            columns.append((name, self._type_name(oid, typmod)))
            identity.append(bool(flags & 1))
        relation = Relation(table, tuple(columns), tuple(identity), self._primary_key(table))
        index = self._index.get(relation)
        if index is None:
            index = self._index[relation] = len(self.versions)
            self.versions.append(relation)
        self.current[relid] = index
        return relation

    def of(self, relid: int, lsn: str) -> Relation:
        """The relation a change refers to."""
        index = self.current.get(relid)
        if index is None:
            raise ChangeDecodeError(
                f"pgoutput sent a change of relation {relid} at LSN {lsn} before describing it"
            )
        return self.versions[index]


def decode_transactions(
    rows: Iterable[tuple[str, int | None, bytes]],
    catalog: RelationCatalog,
    tables: frozenset[str],
    store: ChangeStore | None = None,
    start_lsn: int = 0,
    tracker: SchemaTracker | None = None,
) -> Iterator[PgTransaction]:
    """Group peeked ``(lsn, xid, data)`` pgoutput rows into committed transactions (driver).

    Changes of the captured ``tables`` are kept as their raw messages, with the index of their
    relation in ``catalog.versions`` in :attr:`PgTransaction.relations`; a truncate becomes one
    change per captured table it truncated (:func:`truncate_change`). As in the wal2json path, a
    trailing transaction without its commit is not yielded, and a message outside any transaction
    (a heartbeat) is yielded as an empty transaction at its LSN. With a ``store`` the changes
    go there instead of into the transactions' lists; the changes of transactions that
    committed before ``start_lsn`` (delivered already) are counted but not kept. With a
    ``tracker``, a relation described with a new schema adds a schema change
    (:func:`schema_change`) before the relation's next change, and each transaction records
    the schemas as of its end (:attr:`PgTransaction.schemas`).
    """
    current: PgTransaction | None = None
    for lsn, _xid, data in rows:
        kind = data[0]
        if kind in _ROW_CHANGES:
            if current is None:
                continue  # the peek began inside the transaction: re-read whole later
            index = catalog.current.get(_U32.unpack_from(data, 1)[0])
            if index is None:
                catalog.of(_U32.unpack_from(data, 1)[0], lsn)  # raises
                continue
            if catalog.versions[index].table in tables:
                current.add(data, index)
        elif kind == 0x42:  # B: final LSN, commit time, xid
            current = PgTransaction(_U32.unpack_from(data, 17)[0], 0, 0, None, store=store)
            current.delivered = _U64.unpack_from(data, 1)[0] < start_lsn  # final (commit) LSN
        elif kind == 0x43:  # C: flags, commit LSN, end LSN, commit time
            if current is None:
                continue
            cursor = _Cursor(data, 2)
            current.commit_lsn = cursor.uint64()
            current.end_lsn = cursor.uint64()
            current.commit_ts_us = cursor.int64() + _PG_EPOCH_US
            if tracker is not None:
                current.schemas = tracker.state
            yield current
            current = None
        elif kind == 0x52:  # R
            relation = catalog.learn(data)
            if (
                tracker is not None
                and current is not None
                and not current.delivered
                and relation.table in tables
            ):
                event = tracker.observe(relation.table, relation.columns, relation.key)
                if event is not None:
                    if event.after.key != relation.key:
                        catalog.learn(data)  # described again: the key comes from the tracker
                    current.add(schema_change(event), catalog.current[_U32.unpack_from(data, 1)[0]])
                    current.schema_changed(event)
        elif kind == 0x54 and current is not None:  # T: relations, options, relation ids
            cursor = _Cursor(data, 1)
            count = cursor.int32()
            cursor.byte()
            for _ in range(count):
                relid = cursor.uint32()
                index = catalog.current.get(relid)
                if index is None:
                    catalog.of(relid, lsn)  # raises
                    continue
                if catalog.versions[index].table in tables:
                    current.add(truncate_change(relid), index)
        elif kind == 0x4D and current is None:  # M outside a transaction: a position
            position = parse_lsn(lsn)
            yield PgTransaction(0, position, position, None)
        # Y (types), O (origins) and messages inside transactions carry no row changes.


def schema_change(event: SchemaEvent) -> bytes:
    """The change a schema change gives its table: ``S`` and the event's texts (JSON)."""
    return b"S" + json.dumps([event.before_json(), event.after_json()]).encode()


def truncate_change(relid: int) -> bytes:
    """The change a truncate gives each captured table: a ``T`` message naming it alone."""
    return b"T" + _I32.pack(1) + b"\x00" + _U32.pack(relid)


def _image(
    relation: Relation, values: list[str | bool | None], only_identity: bool
) -> dict[str, object]:
    """Column name -> value as the wal2json path gives it; unchanged TOAST values left out."""
    image: dict[str, object] = {}
    for (name, type_name), in_identity, value in zip(
        relation.columns, relation.identity, values, strict=True
    ):
        if value is False or (only_identity and not in_identity):
            continue
        image[name] = parse_text_value(type_name, value if isinstance(value, str) else None)
    return image


def render_change(
    data: bytes, relation: Relation
) -> tuple[str, str, str | None, str | None, str | None]:
    """One change message -> ``(table, op, key, before, after)`` as output text (executor).

    ``before`` is the replica identity (the old key, or the whole old row with ``REPLICA
    IDENTITY FULL``); an update that did not change it says it from the new row, as wal2json
    does. A truncate is ``op='t'`` with no images.
    """
    kind = data[0]
    if kind == 0x54:
        return relation.table, "t", None, None, None
    if kind == 0x53:  # S: a schema change (schema_change)
        old_schema, new_schema = json.loads(data[1:])
        return relation.table, SCHEMA_CHANGE_OP, None, old_schema, new_schema
    cursor = _Cursor(data, 5)
    before: dict[str, object] | None = None
    after: dict[str, object] | None = None
    marker = cursor.byte()
    if marker in (0x4B, 0x4F):  # K: the old key, O: the old row
        before = _image(relation, cursor.tuple_data(), marker == 0x4B)
        if kind == 0x55:
            marker = cursor.byte()
    if marker == 0x4E:  # N: the new row
        after = _image(relation, cursor.tuple_data(), False)
    op = {0x49: "c", 0x55: "u", 0x44: "d"}.get(kind)
    if op is None or (after is None and kind != 0x44) or (before is None and kind == 0x44):
        raise ChangeDecodeError(f"an unexpected pgoutput change message: {data[:64]!r}")
    if kind == 0x55 and before is None and after is not None:
        before = {
            name: after.get(name)
            for (name, _), in_identity in zip(relation.columns, relation.identity, strict=True)
            if in_identity
        }
    image = after if after is not None else before
    key = None
    if relation.key and image is not None:
        key = {name: image.get(name) for name in relation.key}
    return relation.table, op, json_text(key), json_text(before), json_text(after)
