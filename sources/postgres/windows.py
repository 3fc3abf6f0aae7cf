"""The changes of an incremental snapshot chunk's window, read again from the slot (driver).

A chunk's rows are valid once the stream has been read past its high watermark; rows the
window's transactions changed are dropped from the chunk (DBLog's rule, :mod:`.incremental_plan`).
This module turns the window's peeked transactions into the ``(commit LSN, xid, table, key, old
key)`` tuples that rule needs, for both output plugins.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from ..schema import json_text
from .change_store import ChangeStore, Chunk
from .incremental import ALL_KEYS
from .incremental_plan import WindowChange
from .pgoutput import Relation
from .pgoutput import render_change as render_pgoutput
from .wal2json import PgTransaction, decode_change

__all__ = ["window_changes"]


def window_changes(
    txns: Sequence[PgTransaction],
    store: ChangeStore,
    relations: Sequence[Relation],
    keys: Mapping[str, tuple[str, ...]],
) -> list[WindowChange]:
    """Every change of ``txns`` (their changes in ``store``) as a window entry (driver).

    ``relations`` are the pgoutput relations the changes refer to (unused for wal2json);
    ``keys`` the primary-key columns per table, for a key change's old key. A TRUNCATE touches
    every key of its table (:data:`~.incremental.ALL_KEYS`).
    """
    found: list[WindowChange] = []
    read: tuple[Chunk, tuple[pa.Array, pa.Array | None]] | None = None
    for txn in txns:
        if txn.delivered or not txn.size:
            continue
        for chunk, offset, count in store.spans(txn.first, txn.size):
            if read is None or read[0] is not chunk:
                read = (chunk, chunk.read())  # consecutive transactions share chunks
            texts, relation_of = read[1]
            for i in range(offset, offset + count):
                data = texts[i].as_py()
                if relation_of is None:
                    table, op, key, before = _wal2json_keys(data)
                else:
                    table, op, key, before = _pgoutput_keys(data, relations[relation_of[i].as_py()])
                if op == "t":
                    found.append((txn.end_lsn, txn.xid, table, ALL_KEYS, None))
                    continue
                assert key is not None
                old = None
                if before is not None and keys.get(table):
                    old = json_text({k: before.get(k) for k in keys[table]})
                found.append((txn.end_lsn, txn.xid, table, key, old if old != key else None))
    return found


def _wal2json_keys(text: str) -> tuple[str, str, str | None, dict[str, Any] | None]:
    """``(table, op, key text, before image)`` of one wal2json change (driver, windows)."""
    change = decode_change(text)
    return change.table, change.op, json_text(change.key), change.before


def _pgoutput_keys(
    data: bytes, relation: Relation
) -> tuple[str, str, str | None, dict[str, Any] | None]:
    """``(table, op, key text, before image)`` of one pgoutput change (driver, windows)."""
    table, op, key, before, _ = render_pgoutput(data, relation)
    return table, op, key, None if before is None else json.loads(before)
