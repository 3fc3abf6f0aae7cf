"""Decoding pgoutput, PostgreSQL's built-in logical replication protocol (version 1).

``pg_logical_slot_peek_binary_changes(slot, upto_lsn, upto_nchanges, 'proto_version', '1',
'publication_names', pub, 'messages', 'true')`` yields one row per message: ``B`` (begin: xid),
``R`` (a relation: its name, columns and types, sent before its first change in each decoding
call, and again after its schema changed), ``I`` / ``U`` / ``D`` (row changes, values in
PostgreSQL's text form), ``T`` (truncate of one or more relations), ``M`` (a logical decoding
message), ``Y`` / ``O`` (types, origins: not needed) and ``C`` (commit: its LSNs and time).

The driver groups messages into transactions (:func:`decode_transactions`) and keeps the row
changes as the raw messages, each with the relation it refers to at that point of the stream
(:class:`~.relations.RelationCatalog`). Executors render them (:func:`render_change`) into
exactly the output text the wal2json path and the snapshot give: values go through the
snapshot's :func:`~..tables.parse_text_value`, so NaN and infinities survive as their
PostgreSQL spelling and ``numeric`` keeps every digit. Pure Python, no database access.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from spark_ckpt.errors import ChangeDecodeError
from spark_ckpt.model.schema_changes import SCHEMA_CHANGE_OP, SchemaEvent

from ...schema import json_text
from ..connect import quote_identifier
from ..lsn import parse_lsn
from ..tables import parse_text_value
from ..types import types_json
from .relations import U32, U64, MessageCursor, Relation, RelationCatalog
from .transactions import ChangeColumns, PgTransaction

if TYPE_CHECKING:
    from ...change_store import ChangeStore
    from ..schema_tracking import SchemaTracker

__all__ = [
    "PGOUTPUT",
    "PLUGIN_OPTIONS",
    "Pgoutput",
    "decode_transactions",
    "render_change",
    "schema_change",
    "truncate_change",
]

PLUGIN_OPTIONS: tuple[str, ...] = ("proto_version", "1", "messages", "true")
"""pgoutput options besides ``publication_names`` (``name, value`` pairs, flattened)."""

_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 (PostgreSQL's epoch) in Unix microseconds
_I32 = struct.Struct(">i")
_ROW_CHANGES = frozenset(b"IUD")


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
            index = catalog.current.get(U32.unpack_from(data, 1)[0])
            if index is None:
                catalog.of(U32.unpack_from(data, 1)[0], lsn)  # raises
                continue
            if catalog.versions[index].table in tables:
                current.add(data, index)
        elif kind == 0x42:  # B: final LSN, commit time, xid
            current = PgTransaction(U32.unpack_from(data, 17)[0], 0, 0, None, store=store)
            current.delivered = U64.unpack_from(data, 1)[0] < start_lsn  # final (commit) LSN
        elif kind == 0x43:  # C: flags, commit LSN, end LSN, commit time
            if current is None:
                continue
            cursor = MessageCursor(data, 2)
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
                    current.add(schema_change(event), catalog.current[U32.unpack_from(data, 1)[0]])
                    current.schema_changed(event)
        elif kind == 0x54 and current is not None:  # T: relations, options, relation ids
            cursor = MessageCursor(data, 1)
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
    return b"T" + _I32.pack(1) + b"\x00" + U32.pack(relid)


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
    cursor = MessageCursor(data, 5)
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


def render_columns(
    messages: pa.Array, relation_of: pa.Array | None, relations: Sequence[Relation]
) -> ChangeColumns:
    """Change messages -> the output's text columns (executor, per chunk)."""
    if relation_of is None:
        raise ChangeDecodeError("pgoutput changes stored without their relations")
    rendered = [
        render_change(data, relations[index])
        for data, index in zip(
            messages.to_pylist(), relation_of.to_numpy(zero_copy_only=False).tolist(), strict=True
        )
    ]
    columns = list(zip(*rendered, strict=True)) if rendered else [()] * 5
    table, op, key, before, after = (pa.array(list(c), pa.string()) for c in columns)
    return ChangeColumns(table, op, key, before, after)


def column_types(relation_of: pa.Array | None, relations: Sequence[Relation]) -> pa.Array:
    """``column_types`` per change: its relation's columns (executor, per chunk)."""
    if relation_of is None:
        raise ChangeDecodeError("pgoutput changes stored without their relations")
    texts = pa.array([types_json(relation.columns) for relation in relations], pa.string())
    return texts.take(relation_of)


class Pgoutput:
    """pgoutput as an :class:`~.plugin.OutputPlugin`: binary messages, a publication."""

    name = "pgoutput"
    binary = True
    peek_function = "pg_logical_slot_peek_binary_changes"

    def peek_options(self, tables: Sequence[str], publication: str | None) -> list[str]:
        """The peek's options: the publication streams the captured tables (driver, per peek)."""
        if publication is None:
            raise ChangeDecodeError("pgoutput peeks a publication, and none was named")
        return [*PLUGIN_OPTIONS, "publication_names", quote_identifier(publication)]

    def transactions(
        self,
        rows: Iterable[tuple[str, int | None, bytes]],
        relations: RelationCatalog,
        tables: frozenset[str],
        store: ChangeStore,
        start_lsn: int,
        tracker: SchemaTracker | None,
        watch: frozenset[str],
    ) -> Iterator[PgTransaction]:
        """:func:`decode_transactions`, the catalog's relations described again (driver)."""
        relations.current.clear()  # a new decoding session describes relations again
        return decode_transactions(rows, relations, tables, store, start_lsn, tracker)

    def render(
        self, changes: pa.Array, relation_of: pa.Array | None, relations: Sequence[Relation]
    ) -> ChangeColumns:
        """:func:`render_columns` (executors and the driver's windows, per chunk)."""
        return render_columns(changes, relation_of, relations)

    def column_types(
        self, changes: pa.Array, relation_of: pa.Array | None, relations: Sequence[Relation]
    ) -> pa.Array:
        """:func:`column_types` (executor, per chunk)."""
        return column_types(relation_of, relations)


PGOUTPUT = Pgoutput()
"""The plugin (stateless: the relations a stream learns live in its ``RelationCatalog``)."""
