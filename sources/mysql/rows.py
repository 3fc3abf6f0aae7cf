"""A batch's transactions as change rows, packed for executors (driver) and unpacked (executor).

The driver decodes the binlog (the client library decodes in Python, one connection), so a
partition carries its transactions' rows already built, as an LZ4-compressed Arrow IPC stream;
the executor only unpacks it. Transactions are never split: a partition holds whole ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.ipc

from ..schema import ARROW_SCHEMA, TYPES_COLUMN, json_text
from .transactions import BinlogTransaction, RowChange

__all__ = ["MySqlPartition", "change_keys", "pack", "unpack"]

_IPC = pa.ipc.IpcWriteOptions(compression="lz4")
_PACKED_SCHEMA = ARROW_SCHEMA.append(pa.field(TYPES_COLUMN, pa.string()))
"""The change rows with their ``column_types``: unpacking drops them unless asked for."""


@dataclass(frozen=True)
class MySqlPartition:
    """The picklable value of one input partition: its rows, packed."""

    data: bytes
    rows: int


def pack(
    source: str,
    txns: Sequence[BinlogTransaction],
    first_order: int,
    keys: dict[str, tuple[str, ...]],
) -> MySqlPartition:
    """Transactions numbered from ``first_order`` as change rows (driver, per partition).

    Built column by column: from a list of row dicts, Arrow took 0.6 s per 30,000 rows.
    """
    columns: dict[str, list[object]] = {name: [] for name in _PACKED_SCHEMA.names}
    for order, txn in enumerate(txns, start=first_order):
        txn_id = txn.gtid or str(txn.end)
        for index, change in enumerate(txn.changes):
            columns["txn_id"].append(txn_id)
            columns["txn_order"].append(order)
            columns["txn_size"].append(len(txn.changes))
            columns["event_index"].append(index)
            columns["commit_ts"].append(txn.commit_ts_us)
            columns["table"].append(change.table)
            columns["op"].append(change.op)
            for name, text in _images(change, keys[change.table]).items():
                columns[name].append(text)
            columns[TYPES_COLUMN].append(change.types)
    rows = len(columns["op"])
    columns["source"] = [source] * rows
    batch = pa.RecordBatch.from_arrays(
        [pa.array(columns[field.name], field.type) for field in _PACKED_SCHEMA],
        schema=_PACKED_SCHEMA,
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=_IPC) as writer:
        writer.write_batch(batch)
    return MySqlPartition(sink.getvalue().to_pybytes(), batch.num_rows)


def _images(change: RowChange, key: tuple[str, ...]) -> dict[str, str | None]:
    """``key``, ``before`` and ``after`` of a change row (a schema change's are its schemas)."""
    if change.schema is not None:
        event = change.schema
        return {"key": None, "before": event.before_json(), "after": event.after_json()}
    return {
        "key": json_text(_key(change, key)),
        "before": json_text(change.before),
        "after": json_text(change.after),
    }


def _key(change: RowChange, columns: tuple[str, ...]) -> dict[str, object]:
    """The primary key's values: the new row's, or the old one's for a delete."""
    image = change.after if change.after is not None else change.before
    assert image is not None
    return {column: image.get(column) for column in columns}


def change_keys(change: RowChange, columns: tuple[str, ...]) -> tuple[str, str | None]:
    """A row change's key text, and its old key's when the change moved the row (driver).

    Spelled as the output's ``key`` column spells them (the incremental snapshot's window
    compares them with its chunks' keys).
    """
    key = json_text(_key(change, columns))
    assert key is not None  # a dict renders as text
    if change.before is None or change.after is None:
        return key, None
    old = json_text({column: change.before.get(column) for column in columns})
    return key, None if old == key else old


def unpack(partition: MySqlPartition, column_types: bool) -> Iterator[pa.RecordBatch]:
    """A partition's rows (executor, per task); ``column_types`` keeps that column."""
    for batch in pa.ipc.open_stream(partition.data):
        yield batch if column_types else batch.select(ARROW_SCHEMA.names)
