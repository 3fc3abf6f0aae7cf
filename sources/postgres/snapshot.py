"""The snapshot phase: the captured tables' existing rows, exactly at the slot's consistent point.

A :class:`SnapshotTask` (a thread of the reader process) creates the replication slot with an
exported snapshot, imports that snapshot into a ``REPEATABLE READ`` transaction, and spills every
row of the captured tables into Arrow IPC files in the spill location (option ``snapshotDir``: a
local directory, or an object-store prefix that executors on other machines can read). The
snapshot therefore holds exactly the transactions that committed before the slot's consistent
point, and the slot streams exactly the ones after it: nothing is lost or read twice between
the two.

The snapshot cannot resume half-way (the exported snapshot dies with the process), so while it
runs the source declines checkpoints softly ("snapshot in progress"), and all of it is delivered
as one unit in one batch. A manifest marks the spill complete; a restart that finds it complete
and the slot untouched delivers the same rows again, otherwise the snapshot is redone with a new
slot (nothing of the failed attempt was ever visible: the 2PC sink saw no ``commits/N``).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from spark_ckpt.state.storage import Location
from spark_ckpt.testing.faults import crash_point

from ..snapshot_spill import FILE_ROWS, SpillDirectory
from ..snapshot_thread import SnapshotThread
from .connect import connect
from .plugins import PLUGIN
from .row_text import copy_rows
from .slot import Slot
from .tables import TableInfo

__all__ = ["SnapshotManifest", "SnapshotSpill", "SnapshotTask", "estimated_rows"]

_log = logging.getLogger(__name__)


@dataclass
class SnapshotManifest:
    """The state of a snapshot spill.

    Attributes
    ----------
    slot
        The slot the snapshot belongs to.
    consistent_point
        The slot's consistent point (LSN): the snapshot shows exactly what committed before it.
    taken_at_us
        When the snapshot was taken (microseconds since the epoch); the rows' ``commit_ts``.
    files
        ``(file name, rows)`` in order.
    complete
        True once every table was read.
    """

    slot: str
    consistent_point: int
    taken_at_us: int
    files: list[tuple[str, int]]
    complete: bool

    @property
    def rows(self) -> int:
        """Rows in all files."""
        return sum(rows for _, rows in self.files)

    def to_bytes(self) -> bytes:
        """JSON."""
        return json.dumps(self.__dict__, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> SnapshotManifest:
        """Parse :meth:`to_bytes`."""
        body = json.loads(raw)
        body["files"] = [(str(name), int(rows)) for name, rows in body["files"]]
        return cls(**body)


class SnapshotSpill(SpillDirectory):
    """The postgres connector's spill: the snapshot's files with its :class:`SnapshotManifest`.

    Its ``stream/`` directory belongs to the stream phase (:meth:`stream_directory`).
    """

    def manifest(self) -> SnapshotManifest | None:
        """The manifest, or None."""
        data = self.manifest_bytes()
        return None if data is None else SnapshotManifest.from_bytes(data)

    def write_manifest(self, manifest: SnapshotManifest) -> None:
        """Durably replace the manifest (one whole object)."""
        self.write_manifest_bytes(manifest.to_bytes())

    def stream_directory(self) -> Location:
        """Where the stream spills changes beyond its memory limit (:mod:`..change_store`)."""
        return self.directory.child("stream")

    def clear_files(self) -> None:
        """Remove the spill files but keep the manifest (it proves the slot's start later)."""
        manifest = self.manifest()
        if manifest is None:
            return
        for name, _ in manifest.files:
            self.file(name).delete()


class SnapshotTask(SnapshotThread[SnapshotManifest]):
    """Takes the snapshot in the background (reader process, once per snapshot attempt).

    Parameters
    ----------
    dsn
        Connection string.
    slot_name
        The slot to create (it must not exist).
    tables
        The captured tables.
    spill
        Where the rows go.
    plugin
        The slot's output plugin.
    """

    def __init__(
        self,
        dsn: str,
        slot_name: str,
        tables: list[TableInfo],
        spill: SnapshotSpill,
        plugin: str = PLUGIN,
    ) -> None:
        super().__init__(f"txn-cdc-snapshot-{slot_name}", len(tables), _log)
        self.dsn = dsn
        self.slot_name = slot_name
        self.tables = tables
        self.spill = spill
        self.plugin = plugin

    def take(self) -> SnapshotManifest:
        """Create the slot with its snapshot and spill every table (the task's thread)."""
        self.spill.clear()
        self.spill.directory.make_dirs()
        slot = Slot(self.dsn, self.slot_name, self.plugin)
        exported = slot.create_with_snapshot()
        slot.close()
        taken_at = int(time.time() * 1_000_000)
        manifest = SnapshotManifest(self.slot_name, exported.consistent_point, taken_at, [], False)
        # Written before reading: a restart recognises the slot as this source's own.
        self.spill.write_manifest(manifest)
        with connect(self.dsn, autocommit=False) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            # A utility statement: no bind parameters, so the name goes in as a literal.
            conn.execute(
                sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(exported.snapshot_name))
            )
            exported.release()  # the importing transaction keeps the snapshot alive now
            self.rows_estimated = estimated_rows(conn, self.tables)
            for index, table in enumerate(self.tables):
                self.current_table = table.name
                self._spill_table(conn, table, manifest)
                self.tables_done = index + 1
                crash_point("during_snapshot", index)
            conn.rollback()
        self.current_table = None
        _log.info("postgres snapshot of slot %s: %s", self.slot_name, self.progress().summary)
        manifest.complete = True
        self.spill.write_manifest(manifest)
        return manifest

    def _spill_table(self, conn: Any, table: TableInfo, manifest: SnapshotManifest) -> None:
        for keys, afters in copy_rows(conn, table, table.select_text(), FILE_ROWS):
            name = self.spill.write_file(table.name, keys, afters, len(manifest.files))
            manifest.files.append((name, len(afters)))
            self.rows_read += len(afters)
            self.log_progress(f"postgres snapshot of slot {self.slot_name}")


def estimated_rows(conn: Any, tables: list[TableInfo]) -> int | None:
    """The server's row estimate for ``tables`` (None when one was never analyzed)."""
    total = 0
    for table in tables:
        row = conn.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(format('%%I.%%I', "
            "%s::text, %s::text))",
            (table.schema, table.table),
        ).fetchone()
        if row is None or row[0] is None or row[0] < 0:
            return None
        total += int(row[0])
    return total or None
