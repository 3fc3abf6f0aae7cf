"""Partitions of stream batches, and how executors turn them into rows.

A partition holds transactions (or parts of large ones) and the chunks of their changes.

The driver groups a batch's transactions into partitions (:func:`fill_partitions`), each naming
the chunk parts that hold its changes (:func:`chunk_spans`); an executor decodes one chunk part
at a time (:func:`stream_rows`) with the output plugin that wrote it (:mod:`.decoding`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_ckpt.errors import ChangeDecodeError

from ..change_store import ChangeStore, Chunk, Span
from ..partitions import split_after
from ..schema import change_batch, with_types
from .decoding.by_name import output_plugin
from .decoding.relations import Relation
from .decoding.transactions import PgTransaction
from .stored_changes import stored_changes

__all__ = [
    "PgStreamPartition",
    "Piece",
    "chunk_spans",
    "fill_partitions",
    "plan_stream_partitions",
    "stream_rows",
]


Piece = tuple[int, int, int | None, int, int, int]
"""``(xid, txn_order, commit_ts_us, transaction size, first event index, changes)``: a
transaction, or the part of a large one, in a partition."""


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


def fill_partitions(
    pieces: list[tuple[PgTransaction, Piece]], limit: int
) -> Iterator[list[tuple[PgTransaction, Piece]]]:
    """Group consecutive pieces into partitions of at most ``limit`` changes (whole pieces)."""
    part: list[tuple[PgTransaction, Piece]] = []
    changes = 0
    for item in pieces:
        count = item[1][5]
        if part and changes + count > limit:
            yield part
            part, changes = [], 0
        part.append(item)
        changes += count
    if part:
        yield part


def chunk_spans(part: list[tuple[PgTransaction, Piece]]) -> tuple[Span, ...]:
    """The chunk parts holding a partition's pieces, consecutive positions merged (driver)."""
    ranges: list[tuple[ChangeStore, int, int]] = []
    for txn, piece in part:
        assert txn.store is not None
        first, count = txn.first + piece[4], piece[5]
        if ranges and ranges[-1][0] is txn.store and ranges[-1][1] + ranges[-1][2] == first:
            store, start, length = ranges[-1]
            ranges[-1] = (store, start, length + count)
        else:
            ranges.append((txn.store, first, count))
    return tuple(span for store, first, count in ranges for span in store.spans(first, count))


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
    sizes = [t.size for t in txns]
    bounds = [0, *(i + 1 for i in split_after(sizes, limit, spread=2))]
    partitions: list[object] = []
    for lo, hi in itertools.pairwise([*bounds, len(txns)]):
        pieces: list[tuple[PgTransaction, Piece]] = []
        for order, t in enumerate(txns[lo:hi], start=emitted + lo):
            for start in range(0, t.size, limit):
                count = min(limit, t.size - start)
                pieces.append((t, (t.xid, order, t.commit_ts_us, t.size, start, count)))
        for part in fill_partitions(pieces, limit):
            spans = chunk_spans(part)
            partitions.append(
                PgStreamPartition(source, plugin, tuple(p for _, p in part), spans, relations)
            )
    return partitions


def stream_rows(
    partition: PgStreamPartition, column_types: bool = False
) -> Iterator[pa.RecordBatch]:
    """A partition's changes as record batches, decoded column-wise (executor, per task).

    Decoded one chunk span at a time (at most :data:`..change_store.CHUNK_CHANGES` changes),
    whatever the transactions' sizes, so memory stays bounded.
    """
    pieces = partition.pieces
    sizes = np.fromiter((p[5] for p in pieces), dtype=np.int64, count=len(pieces))
    firsts = np.fromiter((p[4] for p in pieces), dtype=np.int64, count=len(pieces))
    total = int(sizes.sum())
    stored = sum(n for _, _, n in partition.spans)
    if total != stored:
        raise ChangeDecodeError(f"a partition holds {stored} changes, its transactions {total}")
    # Per-change values of its piece; event_index counts from the piece's first event.
    owner = np.repeat(np.arange(len(pieces)), sizes)
    within = np.arange(total) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    event_index = (within + np.repeat(firsts, sizes)).astype(np.int32)
    txn_ids = pa.array([str(p[0]) for p in pieces], pa.string())
    orders = pa.array([p[1] for p in pieces], pa.int64())
    commit_ts = pa.array([p[2] for p in pieces], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    txn_sizes = pa.array([p[3] for p in pieces], pa.int32())
    source = pa.array([partition.source], pa.string())
    plugin = output_plugin(partition.plugin)
    first = 0
    read: tuple[Chunk, tuple[pa.Array, pa.Array | None]] | None = None
    for chunk, offset, count in partition.spans:
        if read is None or read[0] is not chunk:
            read = (chunk, stored_changes(chunk.read()))  # spans of one chunk: read once
        texts, relation_of = read[1]
        piece = texts.slice(offset, count)
        indexes = None if relation_of is None else relation_of.slice(offset, count)
        changes = plugin.render(piece, indexes, partition.relations)
        types = plugin.column_types(piece, indexes, partition.relations) if column_types else None
        of = pa.array(owner[first : first + count])
        batch = change_batch(
            source=source.take(np.zeros(count, dtype=np.int32)),
            txn_id=txn_ids.take(of),
            txn_order=orders.take(of),
            txn_size=txn_sizes.take(of),
            event_index=pa.array(event_index[first : first + count]),
            commit_ts=commit_ts.take(of),
            table=changes.table,
            op=changes.op,
            key=changes.key,
            before=changes.before,
            after=changes.after,
        )
        yield batch if types is None else with_types(batch, types)
        first += count
