"""Partitions of postgres stream batches, and how executors turn them into rows.

A partition holds transactions (or parts of large ones) and the chunks of their changes
(:mod:`..stored_partitions`); an executor decodes one chunk part at a time with the output plugin
that wrote it (:mod:`.decoding`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from ..change_store import Span
from ..stored_partitions import Piece, Rendered, planned_pieces, stored_rows
from .decoding.by_name import output_plugin
from .decoding.relations import Relation
from .decoding.transactions import PgTransaction
from .stored_changes import stored_changes

__all__ = ["PgStreamPartition", "plan_stream_partitions", "stream_rows"]


@dataclass(frozen=True)
class PgStreamPartition:
    """Transactions (or parts of large ones) as peeked, and the chunks holding their changes.

    The driver only found the boundaries; executors decode the changes (in parallel), one chunk
    at a time (:mod:`..change_store`). A transaction larger than ``changes_per_partition`` is
    split across partitions of its batch, each part saying where it starts (its first event
    index), so no task holds more than a partition's worth of it.
    """

    source: str
    plugin: str
    """The output plugin that wrote the changes (:func:`~.decoding.by_name.output_plugin`)."""
    pieces: tuple[Piece, ...]
    spans: tuple[Span, ...]
    relations: tuple[Relation, ...] = ()
    """pgoutput: the relations the changes' indexes refer to (empty for wal2json)."""


def plan_stream_partitions(
    txns: list[PgTransaction],
    emitted: int,
    limit: int,
    source: str,
    plugin: str,
    relations: tuple[Relation, ...],
) -> list[object]:
    """The partitions of a batch's transactions, ``emitted`` before them (driver, per batch).

    At transaction boundaries, in runs of about ``limit`` changes, and at least two runs when
    there is enough work for both executor cores; a transaction larger than a partition is split
    into parts (each knows its first event index). ``plugin`` names the output plugin;
    ``relations`` are the pgoutput relations the changes refer to (empty for wal2json).
    """
    return [
        PgStreamPartition(source, plugin, pieces, spans, relations)
        for pieces, spans in planned_pieces(txns, [t.xid for t in txns], emitted, limit)
    ]


def stream_rows(
    partition: PgStreamPartition, column_types: bool = False
) -> Iterator[pa.RecordBatch]:
    """A partition's changes as record batches, decoded column-wise (executor, per task).

    Decoded one chunk span at a time (at most :data:`..change_store.CHUNK_CHANGES` changes),
    whatever the transactions' sizes, so memory stays bounded.
    """
    plugin = output_plugin(partition.plugin)

    def render(chunk: pa.RecordBatch, offset: int, count: int) -> tuple[Rendered, pa.Array | None]:
        texts, relation_of = stored_changes(chunk)
        piece = texts.slice(offset, count)
        indexes = None if relation_of is None else relation_of.slice(offset, count)
        changes = plugin.render(piece, indexes, partition.relations)
        types = plugin.column_types(piece, indexes, partition.relations) if column_types else None
        return changes, types

    spans = partition.spans
    yield from stored_rows(partition.source, partition.pieces, spans, render, column_types)
