"""What an incremental snapshot's batch does, as every connector's chunk planner answers it.

The postgres and mysql planners (``<connector>/incremental_plan.py``) differ in how they find a
chunk's bounds, read its window and decide which keys it leaves out; what they answer, how a
logged batch finds the reads of the chunks it emitted again, and how emitted chunks' files go,
are the same, and live here. Pure; runs on the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from spark_ckpt.errors import RestoreError
from spark_ckpt.state.storage import Location

from .chunk_spill import ChunkEmitPartition, chunk_files
from .chunks import IncrementalState, PendingChunk

__all__ = ["ChunkWork", "discard_chunks", "reads_of_logged_batch"]

ReadPartition = TypeVar("ReadPartition")
"""A connector's partition reading one chunk on an executor."""
Read = TypeVar("Read")
"""A connector's record of one chunk's read (its watermarks)."""


@dataclass(frozen=True)
class ChunkWork(Generic[ReadPartition]):
    """What a batch does for the snapshot.

    Attributes
    ----------
    state
        The snapshot state at the batch's end.
    emits
        Partitions emitting chunks, in unit order (each one unit; empty chunks left out).
    reads
        Partitions reading chunks.
    emitted
        The chunks emitted (their files go once the batch commits: :func:`discard_chunks`).
    position
        Where the emitted chunks are placed in the stream, the batch's end when it emits any:
        the stream part's end, or the highest high watermark among the chunks ready (in the
        connector's position order: an LSN, a binlog ordinal).
    """

    state: IncrementalState
    emits: list[ChunkEmitPartition]
    reads: list[ReadPartition]
    emitted: list[PendingChunk]
    position: int

    @property
    def partitions(self) -> list[object]:
        """Emits first, then reads."""
        return [*self.emits, *self.reads]


def reads_of_logged_batch(
    start: IncrementalState,
    end: IncrementalState,
    directory: Location,
    load_read: Callable[[Location, PendingChunk], Read | None],
    checkpoint: int,
    start_over: str,
) -> list[tuple[PendingChunk, Read]]:
    """The chunks a logged batch emitted (pending at its start, not at its end), with their reads.

    Runs on the driver, when a batch logged before a restart is planned again: it must emit
    the same chunks, from the same spilled rows. ``start_over`` ends the error's advice (how to
    start over: what else to make new besides the checkpoint location).

    Raises
    ------
    RestoreError
        When a chunk's read is gone from the spill: the batch cannot be run again as logged.
    """
    names = {c.name for c in end.pending}
    ready = []
    for chunk in (c for c in start.pending if c.name not in names):
        read = load_read(directory, chunk)
        if read is None:
            raise RestoreError(
                f"the logged batch {checkpoint} emits snapshot chunk {chunk.name}, but its "
                f"spilled rows are gone from {directory.url}: the batch cannot be run again as "
                f"logged. Keep option snapshotDir on storage that outlives the driver, or start "
                f"over with {start_over}"
            )
        ready.append((chunk, read))
    return ready


def discard_chunks(directory: Location, chunks: Sequence[PendingChunk]) -> None:
    """Delete emitted chunks' files (driver, once their batch committed)."""
    for chunk in chunks:
        for location in chunk_files(directory, chunk):
            location.delete()
