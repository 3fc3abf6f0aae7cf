"""The initial snapshot phase (``snapshot=initial``) of the ``mysql`` connector (driver).

While the :class:`~.snapshot.SnapshotTask` reads the tables, the source declines checkpoints
softly (one open unit, growing as rows arrive; a ``Trigger.availableNow`` run waits for it
instead). Once it is done, the whole snapshot is one unit, a batch of its own whose partitions
read the spill on executors (:mod:`spark_ckpt.sources.snapshot_spill`), ending at the binlog
position the snapshot is consistent with. A re-run of that batch after a restart reads the same
spill; without it the batch cannot be the same, which is a typed error, never a different batch.
Tables that are empty give no snapshot batch: the stream starts at the snapshot's position.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_ckpt.errors import LogRewrittenError

from ..connector import Plan
from ..snapshot_progress import SnapshotProgress
from ..snapshot_spill import SnapshotPartition, snapshot_partitions
from .binlog_offset import BinlogOffset
from .snapshot import SnapshotManifest, SnapshotSpill, SnapshotTask

if TYPE_CHECKING:
    from .options import MySqlOptions

__all__ = ["InitialSnapshot"]


class InitialSnapshot:
    """The snapshot task of one query run and the batch it becomes (driver only).

    Parameters
    ----------
    options
        The connector's options.
    keys
        Each captured table's primary key columns.
    spill
        Where the snapshot's rows and manifest are kept.
    source, changes_per_partition, column_types
        What the snapshot's partitions carry (the connector's).
    """

    def __init__(
        self,
        options: MySqlOptions,
        keys: dict[str, tuple[str, ...]],
        spill: SnapshotSpill,
        source: str,
        changes_per_partition: int,
        column_types: bool,
    ) -> None:
        self.options = options
        self.keys = keys
        self.spill = spill
        self._source = source
        self._changes_per_partition = changes_per_partition
        self._column_types = column_types
        self._task: SnapshotTask | None = None
        self._cleared = False  # the spill was removed once a batch past the snapshot committed

    def progress(self) -> SnapshotProgress | None:
        """The running (or finished) snapshot's progress; None before it started."""
        return None if self._task is None else self._task.progress()

    def plan(self, bounded: bool) -> Plan:
        """The snapshot as one unit once read; a soft decline while it is read (per trigger).

        ``bounded``: a ``Trigger.availableNow`` run, which waits for the snapshot instead of
        declining (it ends at the first trigger that offers nothing).
        """
        task = self._task
        if task is None:
            task = self._task = SnapshotTask(self.options, self.keys, self.spill)
            task.start()
        try:
            waiting = task.held_back(bounded, "the initial snapshot")
        except BaseException:
            self._task = None
            raise
        if waiting is not None:
            return waiting
        manifest = self.manifest()
        return Plan([manifest.rows] if manifest.rows else [], None, 0)

    def manifest(self) -> SnapshotManifest:
        """The finished snapshot's manifest (after :meth:`plan` offered it)."""
        task = self._task
        assert task is not None, "no snapshot was taken"
        assert task.manifest is not None, "the snapshot is not done"
        return task.manifest

    def end(
        self, start: BinlogOffset, checkpoint_id: int, manifest: SnapshotManifest
    ) -> BinlogOffset:
        """Where the snapshot leaves the stream: at its position, with the tables' schemas.

        ``checkpoint_id`` is the snapshot batch's (one unit more emitted), or ``start``'s own
        when the tables were empty (no batch: the stream starts there).
        """
        emitted = start.emitted + (1 if manifest.rows else 0)
        return BinlogOffset(
            checkpoint_id, emitted, manifest.position, manifest.gtid, manifest.schema_state()
        )

    def partitions(self, manifest: SnapshotManifest) -> list[object]:
        """The snapshot batch's partitions (driver, once per snapshot batch or re-run)."""
        values = SnapshotPartition(
            (),
            manifest.rows,
            f"snapshot:{manifest.position}",
            manifest.taken_at_us,
            self._source,
            tuple(manifest.column_types) if self._column_types else (),
        )
        return snapshot_partitions(manifest.files, self.spill, values, self._changes_per_partition)

    def spilled(self, end: BinlogOffset, manifest: SnapshotManifest | None) -> SnapshotManifest:
        """``manifest`` (the spill's, as read), checked as that of the batch ending at ``end``.

        Driver, once per re-run of a logged snapshot batch.

        Raises
        ------
        LogRewrittenError
            When the spill is gone or belongs to another snapshot: a snapshot taken again would
            be consistent with another binlog position than the logged batch's end.
        """
        if manifest is None or not manifest.complete or manifest.position != end.position:
            found = "none" if manifest is None else f"one at {manifest.position}"
            raise LogRewrittenError(
                f"the logged snapshot batch {end.checkpoint} ends at binlog position "
                f"{end.position}, but its spill in {self.spill.directory.url} is gone or another "
                f"snapshot's (found {found}): the batch cannot be delivered again as it was "
                f"planned. Keep snapshotDir until the snapshot's batch commits, or start over "
                f"with a new checkpointLocation"
            )
        return manifest

    def done(self) -> None:
        """The snapshot's batch committed: forget its task and its spill (driver, once)."""
        self._task = None
        if not self._cleared:
            self._cleared = True
            if self.spill.exists():
                self.spill.clear()
