"""The changes of an incremental snapshot chunk's window, read again from the slot (driver).

A chunk's rows are valid once the stream has been read past its high watermark; rows the
window's transactions changed are dropped from the chunk (DBLog's rule, :mod:`.incremental_plan`).
This module turns the window's peeked transactions into the ``(commit LSN, xid, table, key, old
key)`` tuples that rule needs, for both output plugins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import pyarrow as pa

from ..change_store import ChangeStore, Chunk
from ..schema import json_text
from .decoding.plugin import OutputPlugin
from .decoding.relations import Relation
from .decoding.transactions import ChangeColumns, PgTransaction
from .incremental import ALL_KEYS
from .incremental_plan import WindowChange
from .stored_changes import stored_changes

__all__ = ["window_changes"]


def window_changes(
    txns: Sequence[PgTransaction],
    store: ChangeStore,
    plugin: OutputPlugin,
    relations: Sequence[Relation],
    keys: Mapping[str, tuple[str, ...]],
) -> list[WindowChange]:
    """Every change of ``txns`` (their changes in ``store``) as a window entry (driver).

    The changes are rendered by ``plugin`` as executors render them (``relations``: pgoutput's,
    unused for wal2json); ``keys`` the primary-key columns per table, for a key change's old
    key. A TRUNCATE touches every key of its table (:data:`~.incremental.ALL_KEYS`).
    """
    found: list[WindowChange] = []
    read: tuple[Chunk, tuple[pa.Array, pa.Array | None]] | None = None
    for txn in txns:
        if txn.delivered or not txn.size:
            continue
        for chunk, offset, count in store.spans(txn.first, txn.size):
            if read is None or read[0] is not chunk:
                read = (chunk, stored_changes(chunk.read()))  # transactions share chunks
            texts, relation_of = read[1]
            piece = None if relation_of is None else relation_of.slice(offset, count)
            rendered = plugin.render(texts.slice(offset, count), piece, relations)
            for table, op, key, before in _keys(rendered):
                if op == "t":
                    found.append((txn.end_lsn, txn.xid, table, ALL_KEYS, None))
                    continue
                assert key is not None
                old = None
                if before is not None and keys.get(table):
                    image = json.loads(before)
                    old = json_text({k: image.get(k) for k in keys[table]})
                found.append((txn.end_lsn, txn.xid, table, key, old if old != key else None))
    return found


def _keys(columns: ChangeColumns) -> zip[tuple[str, str, str | None, str | None]]:
    """``(table, op, key text, before text)`` per rendered change."""
    return zip(
        columns.table.to_pylist(),
        columns.op.to_pylist(),
        columns.key.to_pylist(),
        columns.before.to_pylist(),
        strict=True,
    )
