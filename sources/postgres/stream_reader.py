"""The streaming phase's reading: peeks of the slot decoded into transactions (driver).

One peek streams the slot's changes (never consumed: the slot is confirmed only when Spark
commits) through the plugin's decoder (:mod:`.decoding.peek`) into
:class:`~.decoding.transactions.PgTransaction` s,
their changes into a :class:`~..change_store.ChangeStore` (compressed, spilled beyond
``streamBufferSize``), while the schema tracker (:mod:`.schema_tracking`) turns DDL the stream
shows, or the catalog shows for wal2json, into changes of their own. The connector
(:mod:`.connector`) plans batches over what this reads; the incremental snapshot reads windows
of the stream again through :meth:`StreamReader.window`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from spark_ckpt.model.schema_changes import TableSchema

from ..change_store import ChangeStore
from .decoding.by_name import output_plugin
from .decoding.peek import decode_peek
from .decoding.relations import RelationCatalog
from .decoding.transactions import PgTransaction
from .incremental_plan import WindowChange
from .options import PostgresOptions
from .schema_tracking import SchemaCatalog, SchemaTracker, drifted
from .slot import Slot
from .snapshot import SnapshotSpill
from .stored_changes import store_schema
from .tables import TableInfo, TypeNames
from .windows import window_changes

__all__ = ["StreamReader"]

_log = logging.getLogger(__name__)


class StreamReader:
    """Decodes peeks of one slot, tracking the captured tables' schemas (driver only).

    Parameters
    ----------
    options
        The connector's options.
    slot
        The slot, opened on first use (the connector's).
    spill
        Where peeked changes spill (``<snapshotDir>/stream/``).
    tables
        The captured tables as described at the start (their keys, for pgoutput's rows).
    """

    def __init__(
        self,
        options: PostgresOptions,
        slot: Callable[[], Slot],
        spill: SnapshotSpill,
        tables: Callable[[], list[TableInfo]],
    ) -> None:
        self.options = options
        self._slot = slot
        self._spill = spill
        self._tables = tables
        self._spill_cleared = False  # this process has cleared an earlier run's spill
        self.type_names = TypeNames(options.dsn)
        self.plugin = output_plugin(options.plugin)
        self.relations = RelationCatalog(self.type_names, self._primary_key)  # pgoutput
        self.schema_catalog = SchemaCatalog(options.dsn)  # schema changes: what the stream lacks
        self._tracker: SchemaTracker | None = None  # the schemas through the current peek

    def close(self) -> None:
        """Close the catalog connections (driver, once)."""
        self.type_names.close()
        self.schema_catalog.close()

    def _primary_key(self, table: str) -> tuple[str, ...]:
        tracked = None if self._tracker is None else self._tracker.state.get(table)
        if tracked is not None:
            return tracked.key  # the key as of the stream's position, changes included
        return next((t.key_in_column_order for t in self._tables() if t.name == table), ())

    def catalog_schemas(self) -> dict[str, TableSchema]:
        """The captured tables' schemas now, from the catalog (driver, at a stream's start)."""
        found = {name: self.schema_catalog.schema(name) for name in self.options.tables}
        return {name: schema for name, schema in found.items() if schema is not None}

    def window(self, since: int, upto: int) -> list[WindowChange]:
        """The captured tables' changes committed in ``[since, upto)``, read again (driver)."""
        _, txns, store = self.read(upto, None, since, track=False)
        keys = {t.name: t.key_in_column_order for t in self._tables()}
        try:
            return window_changes(txns, store, self.plugin, self.relations.versions, keys)
        finally:
            store.discard()

    def read(
        self,
        upto_lsn: int | None,
        upto_rows: int | None,
        start_lsn: int,
        schemas: Mapping[str, TableSchema] | None = None,
        track: bool = True,
    ) -> tuple[int, list[PgTransaction], ChangeStore]:
        """Stream a peek of the slot into transactions; return (rows read, them, their changes).

        Runs on the driver. Changes go to a new :class:`ChangeStore` as they arrive, so memory
        is bounded by ``streamBufferSize`` whatever the transactions' sizes; those of
        transactions that committed before ``start_lsn`` (delivered, not yet confirmed) are not
        kept. With ``track``, schema changes since ``schemas`` (the start offset's) are found
        and become changes of their own (:mod:`.schema_tracking`): from pgoutput's relation
        messages, or, for wal2json, from the changes of the tables whose catalog differs from
        ``schemas`` after the peek (the peek is read again, watching them, when one does).
        """
        if not self._spill_cleared:
            # Chunks an earlier run spilled (a killed driver never discarded them). Not in the
            # connector's check(): Spark also builds readers in other processes, which read
            # nothing.
            self._spill.stream_directory().delete_tree()
            self._spill_cleared = True
        if track and schemas is None:
            schemas = self.catalog_schemas()  # an offset from before schema tracking
        watch: frozenset[str] = frozenset()
        while True:
            counted, txns, store = self._read_once(
                upto_lsn, upto_rows, start_lsn, schemas if track else None, watch
            )
            if not track or self.options.plugin != "wal2json" or not schemas:
                break
            # Read after the peek: any DDL the peek decoded is in the catalog by now.
            drift = drifted(schemas, self.schema_catalog.column_lists(schemas))
            if drift <= watch:
                break
            store.discard()
            watch |= drift
        if store.spilled_chunks:
            _log.info(
                "postgres slot %s: %d of %d chunks of peeked changes spilled to %s "
                "(streamBufferSize %d bytes)",
                self.options.slot,
                store.spilled_chunks,
                len(store.chunks),
                store.spill_directory.url,
                self.options.stream_buffer_size,
            )
        return counted, txns, store

    def _read_once(
        self,
        upto_lsn: int | None,
        upto_rows: int | None,
        start_lsn: int,
        schemas: Mapping[str, TableSchema] | None,
        watch: frozenset[str],
    ) -> tuple[int, list[PgTransaction], ChangeStore]:
        """One peek of :meth:`read`, schema changes tracked unless ``schemas`` is None."""
        store = ChangeStore(
            store_schema(self.plugin.binary),
            self._spill.stream_directory(),
            self.options.stream_buffer_size,
        )
        counted = 0

        def rows() -> Iterator[tuple[str, int | None, Any]]:
            nonlocal counted
            for row in self._slot().stream(upto_lsn, upto_rows, self.options.tables):
                counted += 1
                yield row

        tables = frozenset(self.options.tables)
        tracker = None
        if schemas is not None:
            tracker = self._tracker = SchemaTracker(
                schemas, self.schema_catalog.describe, rebuilds=True
            )
        try:
            txns = decode_peek(
                rows(), self.plugin, self.relations, tables, store, start_lsn, tracker, watch
            )
        finally:
            self._tracker = None
        store.seal()
        return counted, txns, store
