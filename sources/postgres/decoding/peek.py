"""One peek of the slot, decoded into committed transactions with the slot's output plugin.

Changes are only ever *peeked* (the slot is confirmed when Spark commits a batch), so every peek
is a new decoding session: pgoutput describes its relations again in it. Runs on the driver, once
per peek.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .plugin import OutputPlugin
from .relations import RelationCatalog
from .transactions import PgTransaction

if TYPE_CHECKING:
    from ...change_store import ChangeStore
    from ..schema_tracking import SchemaTracker

__all__ = ["decode_peek"]


def decode_peek(
    rows: Iterable[tuple[str, int | None, Any]],
    plugin: OutputPlugin,
    relations: RelationCatalog,
    tables: frozenset[str],
    store: ChangeStore,
    start_lsn: int,
    tracker: SchemaTracker | None = None,
    watch: frozenset[str] = frozenset(),
) -> list[PgTransaction]:
    """The committed transactions of a peek's ``(lsn, xid, data)`` rows, oldest first.

    Their changes go to ``store``; those of transactions that committed before ``start_lsn``
    (delivered, not yet confirmed) are not kept. ``relations`` is pgoutput's catalog (unused for
    wal2json); schema changes are found by ``tracker`` (wal2json watches the ``watch`` tables).
    """
    # Hundreds of thousands of rows and transactions, none of them cyclic: a cyclic GC pass
    # every few hundred allocations would only re-scan them (about a third of the grouping).
    enabled = gc.isenabled()
    gc.disable()
    try:
        return list(plugin.transactions(rows, relations, tables, store, start_lsn, tracker, watch))
    finally:
        if enabled:
            gc.enable()
