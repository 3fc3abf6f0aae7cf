"""What the connector asks of a logical decoding output plugin (:class:`OutputPlugin`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from .relations import Relation, RelationCatalog
from .transactions import ChangeColumns, PgTransaction

if TYPE_CHECKING:
    from ...change_store import ChangeStore
    from ..schema_tracking import SchemaTracker

__all__ = ["OutputPlugin"]


class OutputPlugin(Protocol):
    """One output plugin: how a slot is peeked with it, grouped (driver) and rendered (executors).

    Implementations are stateless (:data:`.wal2json.WAL2JSON`, :data:`.pgoutput.PGOUTPUT`); what
    a stream learns as it reads (pgoutput's relations) is passed in. A new plugin implements
    these five members and joins :func:`.by_name.output_plugin` and the option ``plugin``.
    """

    @property
    def name(self) -> str:
        """The plugin's name, as ``pg_create_logical_replication_slot`` takes it."""

    @property
    def binary(self) -> bool:
        """Whether its output is ``bytea`` (peeked with binary results) rather than text."""

    @property
    def peek_function(self) -> str:
        """``pg_logical_slot_peek_changes`` or its ``_binary_`` twin."""

    def peek_options(self, tables: Sequence[str], publication: str | None) -> list[str]:
        """The plugin's options for one peek, ``name, value`` flattened (driver, per peek)."""

    def transactions(
        self,
        rows: Iterable[tuple[str, int | None, Any]],
        relations: RelationCatalog,
        tables: frozenset[str],
        store: ChangeStore,
        start_lsn: int,
        tracker: SchemaTracker | None,
        watch: frozenset[str],
    ) -> Iterator[PgTransaction]:
        """Group a peek's ``(lsn, xid, data)`` rows into committed transactions (driver).

        Changes go to ``store``; those of transactions committed before ``start_lsn`` are
        counted, not kept. With a ``tracker``, schema changes become changes of their own
        (wal2json finds them in the changes of the ``watch`` tables only).
        """

    def render(
        self, changes: pa.Array, relation_of: pa.Array | None, relations: Sequence[Relation]
    ) -> ChangeColumns:
        """Stored changes -> the output's text columns (executor per chunk; driver per window).

        ``relation_of`` / ``relations``: pgoutput's relation per change (None / empty for
        wal2json, whose changes name their table).
        """

    def column_types(
        self, changes: pa.Array, relation_of: pa.Array | None, relations: Sequence[Relation]
    ) -> pa.Array:
        """The ``column_types`` column of stored changes (executor, per chunk)."""
