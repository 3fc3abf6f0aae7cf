"""Which row groups of a Parquet file hold given rows, and where those rows land once read."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

__all__ = ["row_group_positions"]


def row_group_positions(sizes: Sequence[int], rows: Sequence[int]) -> tuple[list[int], list[int]]:
    """The row groups holding ``rows`` (0-based positions in the file), and the rows' indexes.

    ``sizes``: each row group's row count, in file order. Returns the groups to read (ascending)
    and, for each of ``rows`` in its order, its index in the table those groups make when read
    one after the other. Pure; runs wherever a file's rows are picked (driver or executor).

    Raises
    ------
    IndexError
        For a position outside the file.
    """
    starts = list(itertools.accumulate(sizes, initial=0))  # each group's first row, then the end
    group_of = []
    for row in rows:
        if not 0 <= row < starts[-1]:
            raise IndexError(f"row {row} is outside a file of {starts[-1]} rows")
        group_of.append(bisect.bisect_right(starts, row) - 1)
    groups = sorted(set(group_of))
    # accumulate's last value (the read's row count) has no group: strict=False drops it.
    read_starts = itertools.accumulate((sizes[g] for g in groups), initial=0)
    first_in_read = dict(zip(groups, read_starts, strict=False))
    placed = zip(rows, group_of, strict=True)
    return groups, [first_in_read[group] + row - starts[group] for row, group in placed]
