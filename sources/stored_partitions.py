"""Partitions of transactions whose changes are in a change store, and their rows (executors).

A connector that keeps read changes in a :class:`~.change_store.ChangeStore` (postgres, mysql)
hands executors the chunk parts holding them, never the changes inline. The driver cuts a
batch's transactions into partitions (:func:`planned_pieces`): at transaction boundaries in runs
of about ``limit`` changes, a transaction larger than ``limit`` split into parts (pieces), each
partition naming the chunk parts that hold its pieces (:func:`chunk_spans`). An executor turns
one chunk part at a time into output rows (:func:`stored_rows`), with the connector's own
rendering of a chunk's columns, so memory is bounded on both sides whatever a transaction's
size.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

import numpy as np
import pyarrow as pa

from spark_ckpt.errors import ChangeDecodeError

from .change_store import ChangeStore, Chunk, Span
from .partitions import split_after
from .schema import change_batch, with_types

__all__ = [
    "Piece",
    "Render",
    "Rendered",
    "StoredTransaction",
    "chunk_spans",
    "fill_partitions",
    "planned_pieces",
    "stored_rows",
]

Piece = tuple[object, int, int | None, int, int, int]
"""``(txn id, txn_order, commit_ts_us, transaction size, first event index, changes)``: a
transaction, or the part of a large one, in a partition (the id is written as text)."""


class StoredTransaction(Protocol):
    """What partitioning needs of a transaction whose changes are in a store."""

    @property
    def store(self) -> ChangeStore | None:
        """The store holding its changes."""

    @property
    def first(self) -> int:
        """The position of its first change in the store."""

    @property
    def size(self) -> int:
        """Its changes."""

    @property
    def commit_ts_us(self) -> int | None:
        """Its commit time, microseconds since the epoch."""


class Rendered(Protocol):
    """A chunk part's output columns (executor)."""

    @property
    def table(self) -> pa.Array:
        """``database.table`` or ``schema.table`` of each change."""

    @property
    def op(self) -> pa.Array:
        """Each change's ``op``."""

    @property
    def key(self) -> pa.Array:
        """Each change's ``key`` text."""

    @property
    def before(self) -> pa.Array:
        """Each change's ``before`` text."""

    @property
    def after(self) -> pa.Array:
        """Each change's ``after`` text."""


Render = Callable[[pa.RecordBatch, int, int], tuple[Rendered, pa.Array | None]]
"""``(chunk's columns, first change, changes) -> (output columns, column_types or None)``."""


_T = TypeVar("_T")


def fill_partitions(pieces: list[tuple[_T, Piece]], limit: int) -> Iterator[list[tuple[_T, Piece]]]:
    """Group consecutive pieces into partitions of at most ``limit`` changes (whole pieces)."""
    part: list[tuple[_T, Piece]] = []
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


def chunk_spans(part: Sequence[tuple[StoredTransaction, Piece]]) -> tuple[Span, ...]:
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


def planned_pieces(
    txns: Sequence[StoredTransaction], ids: Sequence[object], emitted: int, limit: int
) -> list[tuple[tuple[Piece, ...], tuple[Span, ...]]]:
    """Each partition's pieces and chunk parts, ``emitted`` transactions before (driver).

    At transaction boundaries, in runs of about ``limit`` changes, and at least two runs when
    there is enough work for both executor cores; a transaction larger than a partition is
    split into parts (each knows its first event index). ``ids[i]`` is ``txns[i]``'s id.
    """
    sizes = [t.size for t in txns]
    bounds = [0, *(i + 1 for i in split_after(sizes, limit, spread=2))]
    partitions: list[tuple[tuple[Piece, ...], tuple[Span, ...]]] = []
    for lo, hi in itertools.pairwise([*bounds, len(txns)]):
        pieces: list[tuple[StoredTransaction, Piece]] = []
        run = zip(txns[lo:hi], ids[lo:hi], strict=True)
        for order, (t, txn_id) in enumerate(run, start=emitted + lo):
            for start in range(0, t.size, limit):
                count = min(limit, t.size - start)
                pieces.append((t, (txn_id, order, t.commit_ts_us, t.size, start, count)))
        for part in fill_partitions(pieces, limit):
            partitions.append((tuple(p for _, p in part), chunk_spans(part)))
    return partitions


def stored_rows(
    source: str,
    pieces: Sequence[Piece],
    spans: Sequence[Span],
    render: Render,
    column_types: bool,
) -> Iterator[pa.RecordBatch]:
    """A partition's changes as record batches, one chunk part at a time (executor, per task).

    ``render`` turns a chunk part into output columns; with ``column_types`` each batch carries
    that column (null where ``render`` gives none).

    Raises
    ------
    ChangeDecodeError
        When the chunk parts hold another number of changes than the pieces say.
    """
    sizes = np.fromiter((p[5] for p in pieces), dtype=np.int64, count=len(pieces))
    firsts = np.fromiter((p[4] for p in pieces), dtype=np.int64, count=len(pieces))
    total = int(sizes.sum())
    stored = sum(n for _, _, n in spans)
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
    source_array = pa.array([source], pa.string())
    first = 0
    read: tuple[Chunk, pa.RecordBatch] | None = None
    for chunk, offset, count in spans:
        if read is None or read[0] is not chunk:
            read = (chunk, chunk.read())  # a chunk several spans share is read once in a row
        changes, types = render(read[1], offset, count)
        of = pa.array(owner[first : first + count])
        batch = change_batch(
            source=source_array.take(np.zeros(count, dtype=np.int32)),
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
        yield with_types(batch, types) if column_types else batch
        first += count
