"""The initial snapshot phase (``snapshot=initial``): the tables read once, as one unit (driver).

A :class:`~.snapshot.SnapshotTask` reads every captured table in one repeatable-read
transaction exported by the slot's creation, spilling the rows (:mod:`.snapshot`); while it
runs the source declines softly (one open unit, growing); once done, the whole snapshot is one
unit, a batch of its own, whose partitions read the spill (:mod:`..snapshot_spill`). A re-run
of that batch after a restart reads the spill again, or takes the snapshot again when the spill
did not survive. The streaming phase starts at the slot's consistent point.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..connector import Plan
from ..snapshot_progress import SnapshotProgress
from ..snapshot_spill import SnapshotPartition, snapshot_partitions
from .lsn import format_lsn
from .options import PostgresOptions
from .slot import Slot
from .slot_checks import claim_snapshot_slot, own_snapshot_slot
from .snapshot import SnapshotSpill, SnapshotTask
from .tables import TableInfo
from .types import types_json

__all__ = ["InitialSnapshot"]

_log = logging.getLogger(__name__)


class InitialSnapshot:
    """The snapshot task of one query run and the batch it becomes (driver only).

    Parameters
    ----------
    options
        The connector's options.
    slot
        The slot, opened on first use (the connector's).
    spill
        Where the snapshot's rows and manifest are kept.
    tables
        The captured tables, described on first use.
    source, changes_per_partition, column_types
        What the snapshot's partitions carry (the connector's).
    """

    def __init__(
        self,
        options: PostgresOptions,
        slot: Callable[[], Slot],
        spill: SnapshotSpill,
        tables: Callable[[], list[TableInfo]],
        source: str,
        changes_per_partition: int,
        column_types: bool,
    ) -> None:
        self.options = options
        self._slot = slot
        self._spill = spill
        self._tables = tables
        self._source = source
        self._changes_per_partition = changes_per_partition
        self._column_types = column_types
        self._task: SnapshotTask | None = None

    def progress(self) -> SnapshotProgress | None:
        """The running (or finished) snapshot's progress; None before it started."""
        return None if self._task is None else self._task.progress()

    @property
    def claimed(self) -> bool:
        """True once this instance claimed the slot and started its snapshot (driver).

        From then on the slot is the snapshot's own, even before the spill's manifest says so:
        the snapshot's thread creates the slot first and writes the manifest right after.
        """
        return self._task is not None

    def done(self) -> None:
        """The snapshot's batch committed: forget its task (driver, once)."""
        self._task = None

    def plan(self, bounded: bool, rerun: bool = False) -> Plan:
        """The snapshot as one unit once read; a soft decline while it is read (per trigger).

        ``bounded``: a ``Trigger.availableNow`` run, which waits for the snapshot instead of
        declining (it ends at the first trigger that offers nothing).
        """
        task = self._task
        if task is None:
            slot = self._slot()
            # A re-run of the logged snapshot batch owns the slot (it was claimed when the batch
            # was planned); otherwise only a slot this source made for its snapshot may go.
            if (rerun and slot.info() is not None) or claim_snapshot_slot(slot, self._spill):
                slot.drop()
            slot.close()
            task = self._task = SnapshotTask(
                self.options.dsn,
                self.options.slot,
                self._tables(),
                self._spill,
                self.options.plugin,
            )
            task.start()
        try:
            waiting = task.held_back(bounded, f"the initial snapshot of slot {self.options.slot!r}")
        except BaseException:
            self._task = None
            raise
        if waiting is not None:
            return waiting
        assert task.manifest is not None
        return Plan([task.manifest.rows], None, 0)

    def partitions(self) -> list[object]:
        """The snapshot batch's partitions, from its spill or a snapshot taken again (driver)."""
        manifest = self._spill.manifest()
        info = self._slot().info()
        reusable = (
            manifest is not None
            and manifest.complete
            and info is not None
            and own_snapshot_slot(self.options.slot, info.confirmed_flush, manifest)
        )
        if not reusable:
            # A re-run of the snapshot batch whose spill did not survive: take it again.
            _log.warning("postgres snapshot of slot %s is taken again", self.options.slot)
            self._task = None
            self.plan(bounded=False, rerun=True)
            task = self._task
            assert task is not None
            task.join()
            if task.error is not None:
                raise task.error
            manifest = task.manifest
        assert manifest is not None
        txn_id = f"snapshot:{self.options.slot}@{format_lsn(manifest.consistent_point)}"
        types: tuple[tuple[str, str], ...] = ()
        if self._column_types:
            types = tuple((t.name, types_json(t.columns)) for t in self._tables())
        values = SnapshotPartition(
            (), manifest.rows, txn_id, manifest.taken_at_us, self._source, types
        )
        return snapshot_partitions(manifest.files, self._spill, values, self._changes_per_partition)
