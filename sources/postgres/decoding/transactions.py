"""What decoding produces, whatever the plugin: transactions (driver) and change columns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_ckpt.model.schema_changes import SchemaEvent, TableSchema

if TYPE_CHECKING:
    from ...change_store import ChangeStore

__all__ = ["ChangeColumns", "PgTransaction"]


@dataclass
class PgTransaction:
    """One committed transaction of the captured tables.

    Attributes
    ----------
    xid
        The transaction id.
    commit_lsn
        LSN of the commit record.
    end_lsn
        LSN just after the commit record: the position to resume (and confirm the slot) after it.
    commit_ts_us
        Commit time in microseconds since the epoch.
    changes
        Row changes of the captured tables in the transaction's order, as the plugin sent them:
        wal2json's JSON text or pgoutput's messages (bytes); empty when the transaction touched
        other tables only. With a ``store`` they go there instead, and this stays empty.
    relations
        pgoutput only: per change, the index of its relation in the stream's
        :class:`~.relations.RelationCatalog`.
    size
        Number of changes.
    first
        With a ``store``: the position of the first change in it.
    store
        Where the changes go (:class:`~...change_store.ChangeStore`); None: :attr:`changes`.
    """

    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts_us: int | None
    changes: list[Any] = field(default_factory=list)
    relations: list[int] = field(default_factory=list)
    size: int = 0
    first: int = 0
    store: ChangeStore | None = field(default=None, compare=False, repr=False)
    delivered: bool = field(default=False, compare=False, repr=False)
    """Committed before the peek's start: its changes are counted, not kept."""
    schemas: Mapping[str, TableSchema] | None = field(default=None, compare=False, repr=False)
    """The captured tables' schemas as of the transaction's end, where tracked."""
    schema_changes: list[str] = field(default_factory=list, compare=False, repr=False)
    """Its schema changes, described (``public.orders: column_renamed name -> title``)."""
    rebuilds: list[str] = field(default_factory=list, compare=False, repr=False)
    """Tables whose schema change begins a new read of them (``rebuild='begin'``)."""

    def schema_changed(self, event: SchemaEvent) -> None:
        """Note a schema change the transaction holds (driver, per schema change)."""
        self.schema_changes.append(event.summary())
        if event.rebuild == "begin":
            self.rebuilds.append(event.table)

    def add(self, data: Any, relation: int | None = None) -> None:
        """Count a change and keep it (driver, per change): in the store, or :attr:`changes`."""
        self.size += 1
        if self.delivered:
            return
        if self.store is not None:
            position = self.store.append((data,) if relation is None else (data, relation))
            if self.size == 1:
                self.first = position
        else:
            self.changes.append(data)
            if relation is not None:
                self.relations.append(relation)


@dataclass(frozen=True)
class ChangeColumns:
    """Output columns of a run of row changes, aligned with the input.

    Attributes
    ----------
    table, op, key, before, after
        String arrays as in the output schema.
    """

    table: pa.Array
    op: pa.Array
    key: pa.Array
    before: pa.Array
    after: pa.Array
