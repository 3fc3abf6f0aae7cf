"""One peek of the slot, decoded into committed transactions with the slot's output plugin.

Changes are only ever *peeked* (the slot is confirmed when Spark commits a batch), so every peek
is a new decoding session: pgoutput describes its relations again in it. Runs on the driver, once
per peek.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable
from typing import Any

from .change_store import ChangeStore
from .pgoutput import RelationCatalog
from .pgoutput import decode_transactions as decode_pgoutput
from .schema_tracking import SchemaTracker
from .wal2json import PgTransaction, SchemaWatcher, decode_transactions

__all__ = ["decode_peek"]


def decode_peek(
    rows: Iterable[tuple[str, int | None, Any]],
    plugin: str,
    relations: RelationCatalog,
    tables: frozenset[str],
    store: ChangeStore,
    start_lsn: int,
    tracker: SchemaTracker | None = None,
    watcher: SchemaWatcher | None = None,
) -> list[PgTransaction]:
    """The committed transactions of a peek's ``(lsn, xid, data)`` rows, oldest first.

    Their changes go to ``store``; those of transactions that committed before ``start_lsn``
    (delivered, not yet confirmed) are not kept. ``relations`` is pgoutput's catalog (unused for
    wal2json); schema changes are found by ``tracker`` (pgoutput) or ``watcher`` (wal2json).
    """
    # Hundreds of thousands of rows and transactions, none of them cyclic: a cyclic GC pass
    # every few hundred allocations would only re-scan them (about a third of the grouping).
    enabled = gc.isenabled()
    gc.disable()
    try:
        if plugin == "pgoutput":
            relations.current.clear()  # a new decoding session describes relations again
            return list(decode_pgoutput(rows, relations, tables, store, start_lsn, tracker))
        return list(decode_transactions(rows, tables, store, start_lsn, watcher))
    finally:
        if enabled:
            gc.enable()
