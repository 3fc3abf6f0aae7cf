"""Splitting a batch into Spark input partitions at unit boundaries, for every connector.

A batch is a run of whole units (transactions, or the snapshot's spill files). Executors read
partitions in parallel, so a batch is cut into runs of about ``per_partition`` changes, never
inside a unit: every partition is then whole transactions, decoded on its own.

Pure Python; runs on the driver, once per batch.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["split_after"]


def split_after(sizes: Sequence[int], per_partition: int, *, spread: int = 1) -> list[int]:
    """Indexes of the units after which a new partition starts.

    A run closes after the unit that brings it to ``per_partition`` changes or more; the last
    unit never starts a new partition after it.

    Parameters
    ----------
    sizes
        Changes per unit, in stream order.
    per_partition
        About how many changes a partition should hold.
    spread
        Cut into at least this many partitions when the batch has enough units (for example
        one per executor core), by lowering ``per_partition`` to ``total / spread``.
    """
    total = sum(sizes)
    target = max(1, min(per_partition, -(-total // max(1, spread))))
    splits: list[int] = []
    run = 0
    for index, size in enumerate(sizes[:-1]):
        run += size
        if run >= target:
            splits.append(index)
            run = 0
    return splits
