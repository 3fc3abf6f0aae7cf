"""Is the slot still the one the query's offsets need? Checks at a start and at a resume (driver).

A query's offsets name positions in one replication slot. Before a new query takes its initial
snapshot, the slot must be new or this source's own unfinished snapshot slot (an existing slot
has moved past where a snapshot taken now would start); before a query resumes, the slot must
still hold every change after the restored offset. Each failure says what happened and how to
start over. Runs on the driver, once per query start.
"""

from __future__ import annotations

import logging

from spark_ckpt.errors import ReplicationSlotError, RestoreError

from .lsn import format_lsn
from .pg_offset import PgOffset
from .slot import Slot
from .snapshot import SnapshotManifest, SnapshotSpill

__all__ = ["check_resume", "claim_snapshot_slot", "own_snapshot_slot"]

_log = logging.getLogger(__name__)


def own_snapshot_slot(slot: str, confirmed: int, manifest: SnapshotManifest | None) -> bool:
    """True for a slot this source created for a snapshot that never completed a batch.

    Such a slot has not moved from the consistent point recorded before the snapshot was read.
    """
    return manifest is not None and manifest.slot == slot and manifest.consistent_point == confirmed


def claim_snapshot_slot(slot: Slot, spill: SnapshotSpill) -> bool:
    """True when the slot exists and is this source's own unfinished snapshot slot.

    Raises
    ------
    ReplicationSlotError
        When a slot of that name exists that this source did not create for its snapshot.
    """
    info = slot.info()
    if info is None:
        return False
    if not own_snapshot_slot(slot.name, info.confirmed_flush, spill.manifest()):
        raise ReplicationSlotError(
            f"replication slot {slot.name!r} already exists, so snapshot=initial "
            f"cannot take a snapshot that matches its start. Drop the slot, choose "
            f"another option 'slot', or use snapshot=never to stream from the slot's "
            f"position"
        )
    return True


def check_resume(slot: Slot, spill: SnapshotSpill, restored: PgOffset) -> None:
    """Check the slot still holds everything after ``restored``.

    Raises
    ------
    RestoreError
        When the slot is gone, or confirmed past the offset (its changes can no longer be read).
    ReplicationSlotError
        When the slot cannot be used (another plugin, invalidated).
    """
    info = slot.info()
    if info is None:
        raise RestoreError(
            f"replication slot {slot.name!r} does not exist, but checkpoint "
            f"{restored.checkpoint} resumes from it: the changes it retained are gone. Start "
            f"over with a new checkpointLocation (snapshot=initial reads the tables again)"
        )
    slot.check(info)
    if restored.lsn is None:
        _check_snapshot_start(slot.name, spill, info.confirmed_flush, restored.checkpoint)
    elif info.confirmed_flush > restored.lsn:
        raise RestoreError(
            f"replication slot {slot.name!r} is confirmed up to "
            f"{format_lsn(info.confirmed_flush)}, past checkpoint {restored.checkpoint}'s "
            f"offset {format_lsn(restored.lsn)}: the changes in between can no longer be read "
            f"(was the checkpoint location restored from an older copy, or the slot used by "
            f"another consumer?). Start over with a new checkpointLocation and slot"
        )


def _check_snapshot_start(slot: str, spill: SnapshotSpill, confirmed: int, checkpoint: int) -> None:
    # Restored right after the snapshot batch: the stream starts at the slot's consistent
    # point, which the snapshot's manifest remembers until the first stream batch commits.
    manifest = spill.manifest()
    if manifest is None or manifest.slot != slot:
        _log.warning(
            "cannot check that slot %s still starts at the snapshot's consistent point: the "
            "snapshot manifest in %s is gone",
            slot,
            spill.directory.url,
        )
        return
    if confirmed != manifest.consistent_point:
        raise RestoreError(
            f"replication slot {slot!r} is confirmed up to {format_lsn(confirmed)}, "
            f"but checkpoint {checkpoint} resumes from the snapshot's consistent point "
            f"{format_lsn(manifest.consistent_point)}: the changes in between can no longer "
            f"be read (was the slot used by another consumer?). Start over with a new "
            f"checkpointLocation and slot"
        )
