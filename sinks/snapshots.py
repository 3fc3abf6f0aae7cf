"""Delta snapshots kept between publishes in one process, brought up to date incrementally.

A full load of a Delta table reads every commit since its last checkpoint, and on an object store
each is a request. Spark runs the sink's driver-side code in Python workers it reuses, and the
control plane's listener lives as long as the driver, so each keeps the snapshots it loaded and
next time reads only the commits that landed since (``update_incremental``: one listing and the
new commits).

A snapshot is checked out by one user at a time and given back when done: the publisher commits
against the very snapshot in which it found the table at N - 1, so no other thread may move that
snapshot forward meanwhile. Two threads wanting the same table at once simply load it twice.
"""

from __future__ import annotations

import threading

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from spark_ckpt.state.storage import Location

from .table import load_table

__all__ = ["check_out", "give_back"]

_KEPT: dict[tuple[str, tuple[tuple[str, str], ...]], DeltaTable] = {}
_LOCK = threading.Lock()


def _key(table: Location) -> tuple[str, tuple[tuple[str, str], ...]]:
    return table.url, tuple(sorted(table.delta_options().items()))


def check_out(table: Location) -> DeltaTable | None:
    """The newest snapshot of ``table`` (None: no table yet), for this caller alone.

    Runs on the driver (any process that publishes), once or more per batch, and in a mirror's
    write tasks (:mod:`.mirror.task_marks`), once per task and table. A kept snapshot is
    updated incrementally; without one, or when updating it fails, the table is loaded afresh.

    Raises
    ------
    StorageError
        When the store cannot be reached or refuses access.
    """
    with _LOCK:
        kept = _KEPT.pop(_key(table), None)
    if kept is not None:
        try:
            kept.update_incremental()
            return kept
        except (OSError, DeltaError):
            pass  # whatever went wrong, a fresh load says it properly (or works)
    return load_table(table)


def give_back(table: Location, delta: DeltaTable | None) -> None:
    """Keep ``delta`` for the next :func:`check_out` of ``table`` (driver); None keeps nothing."""
    if delta is None:
        return
    with _LOCK:
        _KEPT[_key(table)] = delta
