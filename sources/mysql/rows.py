"""A batch's transactions in partitions (driver), and their change rows (executors).

The driver decoded the binlog into change rows as it read them (:mod:`.stored_rows`), kept in
the read's change store; a partition names the chunk parts holding its transactions (or the
part of a large one, :mod:`..stored_partitions`) and the executor only adds each row's
transaction columns. Transactions are cut only when one is larger than a partition, and then
each part knows its first event index.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from ..change_store import Span
from ..stored_partitions import Piece, Rendered, planned_pieces, stored_rows
from .stored_rows import StoredColumns
from .transactions import BinlogTransaction

__all__ = ["MySqlPartition", "partitions", "rows"]


@dataclass(frozen=True)
class MySqlPartition:
    """The picklable value of one input partition: its pieces and the chunk parts holding them."""

    source: str
    pieces: tuple[Piece, ...]
    spans: tuple[Span, ...]

    @property
    def changes(self) -> int:
        """Change rows in the partition."""
        return sum(piece[5] for piece in self.pieces)


def partitions(
    source: str, txns: Sequence[BinlogTransaction], first_order: int, limit: int
) -> list[object]:
    """Transactions numbered from ``first_order`` in partitions of about ``limit`` changes.

    Driver, per batch.
    """
    planned = planned_pieces(txns, [t.txn_id for t in txns], first_order, limit)
    return [MySqlPartition(source, pieces, spans) for pieces, spans in planned]


def rows(partition: MySqlPartition, column_types: bool) -> Iterator[pa.RecordBatch]:
    """A partition's rows (executor, per task); ``column_types`` keeps that column."""

    def render(chunk: pa.RecordBatch, offset: int, count: int) -> tuple[Rendered, pa.Array]:
        columns = StoredColumns(chunk, offset, count)
        return columns, columns.column_types

    spans = partition.spans
    yield from stored_rows(partition.source, partition.pieces, spans, render, column_types)
