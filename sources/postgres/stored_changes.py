"""How the postgres connector keeps peeked changes in the shared change store.

A change is the output plugin's own form: wal2json's text, or a pgoutput message (bytes) with
the index of its relation. :func:`store_schema` names the store's columns for a plugin,
:func:`stored_changes` gives a chunk's back. Driver (store) and executors (chunks), per chunk.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["store_schema", "stored_changes"]


def store_schema(binary: bool) -> pa.Schema:
    """The store's columns: ``data`` (and for pgoutput, ``binary``, each change's ``relation``)."""
    if binary:
        return pa.schema([("data", pa.binary()), ("relation", pa.int32())])
    return pa.schema([("data", pa.string())])


def stored_changes(batch: pa.RecordBatch) -> tuple[pa.Array, pa.Array | None]:
    """A chunk's changes, and (pgoutput) their relation indexes."""
    relation = batch.column("relation") if "relation" in batch.schema.names else None
    return batch.column("data"), relation
