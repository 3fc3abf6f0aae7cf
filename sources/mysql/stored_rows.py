"""The mysql connector's changes as the change store keeps them: change rows' texts.

The driver decodes the binlog (the client decodes in Python), so a change is stored already
rendered: its table, ``op``, ``key``, ``before`` and ``after`` JSON texts and the
``column_types`` of its table map, plus the old key's text when an update moved the row's key
(the incremental snapshot's windows compare keys; executors drop it). A schema change
(``op='s'``) stores its schemas as ``before`` and ``after``, with no key. Rows are appended as
their events are read, so a transaction's changes exist only in the store
(:mod:`..change_store`: compressed, spilled beyond ``streamBufferSize``), never as one list.
Driver, per change (store) and per chunk (windows); executors, per chunk part (rows).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from spark_ckpt.state.storage import Location

from ..change_store import ChangeStore, Span
from ..schema import TYPES_COLUMN, json_text

if TYPE_CHECKING:
    from spark_ckpt.model.schema_changes import SchemaEvent

__all__ = [
    "OLD_KEY",
    "STORE_SCHEMA",
    "Change",
    "StoredColumns",
    "in_memory_store",
    "stored_row",
    "stored_rows_of",
]

OLD_KEY = "old_key"
STORE_SCHEMA = pa.schema(
    [
        ("table", pa.string()),
        ("op", pa.string()),
        ("key", pa.string()),
        ("before", pa.string()),
        ("after", pa.string()),
        (TYPES_COLUMN, pa.string()),
        (OLD_KEY, pa.string()),
    ]
)


class Change(Protocol):
    """A row change read (:class:`~.transactions.RowChange`)."""

    @property
    def table(self) -> str:
        """``database.table``."""

    @property
    def op(self) -> str:
        """``c``, ``u``, ``d``, or ``s`` (a schema change)."""

    @property
    def before(self) -> dict[str, object] | None:
        """The row before, as JSON-ready values."""

    @property
    def after(self) -> dict[str, object] | None:
        """The row after, as JSON-ready values."""

    @property
    def types(self) -> str | None:
        """The ``column_types`` text of its table map."""

    @property
    def schema(self) -> SchemaEvent | None:
        """A schema change's event."""


def stored_row(
    change: Change, key_columns: tuple[str, ...]
) -> tuple[str, str, str | None, str | None, str | None, str | None, str | None]:
    """A change as the store's columns (driver, per change read)."""
    if change.schema is not None:
        event = change.schema
        return change.table, "s", None, event.before_json(), event.after_json(), None, None
    image = change.after if change.after is not None else change.before
    assert image is not None, "a row change has an image"
    key = json_text({column: image.get(column) for column in key_columns})
    old = None
    if change.before is not None and change.after is not None:
        before_key = json_text({column: change.before.get(column) for column in key_columns})
        old = None if before_key == key else before_key
    return (
        change.table,
        change.op,
        key,
        json_text(change.before),
        json_text(change.after),
        change.types,
        old,
    )


def in_memory_store() -> ChangeStore:
    """A store that never spills (the assembler's default: unit tests, replayed fixtures)."""
    return ChangeStore(STORE_SCHEMA, Location(tempfile.gettempdir()), sys.maxsize)


class StoredColumns:
    """A chunk part's output columns, sliced from the stored ones (executor or driver)."""

    def __init__(self, chunk: pa.RecordBatch, offset: int, count: int) -> None:
        part = chunk.slice(offset, count)
        self.table = part.column("table")
        self.op = part.column("op")
        self.key = part.column("key")
        self.before = part.column("before")
        self.after = part.column("after")
        self.column_types = part.column(TYPES_COLUMN)


def stored_rows_of(spans: list[Span]) -> Iterator[dict[str, str | None]]:
    """The stored changes of ``spans`` as dicts of their columns, in order (driver).

    For the incremental snapshot's windows (a few columns of each change) and for tests.
    """
    read: tuple[object, pa.RecordBatch] | None = None
    for chunk, offset, count in spans:
        if read is None or read[0] is not chunk:
            read = (chunk, chunk.read())
        yield from read[1].slice(offset, count).to_pylist()
