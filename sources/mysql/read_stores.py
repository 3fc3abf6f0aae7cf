"""The change stores of the mysql connector's reads, and when each may go.

Each read of the binlog puts its changes in a store of its own (:mod:`.stored_rows`), and a
transaction read stays in its store until a batch takes it, which may be several reads later
(``maxChangesPerTrigger``); Spark plans batch N + 1 before it commits batch N. So a store is
deleted (its spill files with it) only at a commit after which nothing reads it: no batch
planned and not yet committed, no transaction not yet taken, not the read in progress. The
stores' memory shares one bound: a new store may keep in memory what ``streamBufferSize`` leaves
of the others. Pure bookkeeping on the driver, per read and per commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..change_store import ChangeStore
from .stored_rows import STORE_SCHEMA

if TYPE_CHECKING:
    from spark_ckpt.state.storage import Location

    from .transactions import BinlogTransaction

__all__ = ["ReadStores", "stores_of"]

_log = logging.getLogger(__name__)


class ReadStores:
    """The stores of one connector's reads (driver).

    Parameters
    ----------
    spill
        Where chunks beyond the memory bound go (``snapshotDir/stream``).
    memory_limit
        Compressed bytes all the stores together keep in memory (``streamBufferSize``).
    """

    def __init__(self, spill: Location, memory_limit: int) -> None:
        self.spill = spill
        self.memory_limit = memory_limit
        self._kept: list[ChangeStore] = []
        self._retired: list[ChangeStore] = []
        self._planned: dict[int, list[ChangeStore]] = {}
        self._cleared = False

    def new(self) -> ChangeStore:
        """A store for one read, with the memory the kept stores leave (per read)."""
        if not self._cleared:
            # Chunks an earlier run spilled (a killed driver never discarded them). Not at
            # construction: Spark also builds sources in processes that read nothing.
            self.spill.delete_tree()
            self._cleared = True
        held = sum(store.inline_bytes for store in self._kept)
        store = ChangeStore(STORE_SCHEMA, self.spill, max(0, self.memory_limit - held))
        self._kept.append(store)
        return store

    def report(self, store: ChangeStore, source: str) -> None:
        """Log what a read spilled, if anything (per read)."""
        if store.spilled_chunks:
            _log.info(
                "%s: %d of %d chunks of read changes spilled to %s (streamBufferSize %d bytes)",
                source,
                store.spilled_chunks,
                len(store.chunks),
                store.spill_directory.url,
                self.memory_limit,
            )

    def retire(self, store: ChangeStore) -> None:
        """Its read is over: the store goes at a commit once nothing reads it."""
        if _absent(store, self._retired) and not _absent(store, self._kept):
            self._retired.append(store)

    def planned(self, checkpoint: int, txns: Sequence[BinlogTransaction]) -> None:
        """Batch ``checkpoint`` reads ``txns`` (their stores stay until it commits)."""
        self._planned[checkpoint] = stores_of(txns)

    def committed(self, checkpoint: int, live: Iterable[ChangeStore]) -> list[ChangeStore]:
        """Batches up to ``checkpoint`` are done; delete the retired stores nothing reads.

        ``live``: the stores of the read in progress and of the transactions not yet taken.
        Returns the stores deleted.
        """
        for done in [c for c in self._planned if c <= checkpoint]:
            del self._planned[done]
        kept = [*live, *(s for stores in self._planned.values() for s in stores)]
        gone = [store for store in self._retired if _absent(store, kept)]
        for store in gone:
            store.discard()
            self._retired = [s for s in self._retired if s is not store]
            self._kept = [s for s in self._kept if s is not store]
        return gone

    def discard_all(self) -> None:
        """Delete every store (the source stops)."""
        for store in self._kept:
            store.discard()
        self._kept, self._retired, self._planned = [], [], {}


def stores_of(txns: Iterable[BinlogTransaction]) -> list[ChangeStore]:
    """The stores ``txns`` are in, each once."""
    found: list[ChangeStore] = []
    for txn in txns:
        if _absent(txn.store, found):
            found.append(txn.store)
    return found


def _absent(store: ChangeStore, stores: Iterable[ChangeStore]) -> bool:
    return all(store is not other for other in stores)
