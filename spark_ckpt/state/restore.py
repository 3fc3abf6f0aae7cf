"""Restore notifications (FLINK-20396): the exact checkpoint a (re)started query resumes from.

Spark restores a query from its checkpoint location without telling anyone which checkpoint that
is: it resumes after the newest ``commits/C`` and re-runs batch ``C + 1`` when ``offsets/C + 1``
was already logged. Flink's coordinator tells every component ``resetToCheckpoint(C)``, and
restoring ``C`` implies ``C`` completed, so side effects of ``C`` may be committed then and work
staged after ``C`` must be discarded (REFERENCE.md).

:func:`restore_point` reads that fact from the checkpoint directory. The supervisor calls every
installed *restore handler* with it before each attempt starts, while no attempt runs on that
checkpoint location: handlers are found through the entry-point group :data:`RESTORE_GROUP`, so
this module (like the whole control plane) imports no source or sink. Pure Python, no Spark.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.storage import Location, StorageOptions

__all__ = [
    "RESTORE_GROUP",
    "RestoreHandler",
    "RestorePoint",
    "load_restore_handlers",
    "logged_offsets",
    "notify_restore",
    "restore_point",
]

RESTORE_GROUP = "spark_ckpt.restore_handlers"
"""Entry-point group of restore handlers, keyed by the component's format name."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestorePoint:
    """Where a query (re)starts.

    Attributes
    ----------
    checkpoint_location
        The query's checkpoint location.
    checkpoint_id
        The checkpoint it resumes from: the newest batch with ``commits/<id>``; None for a query
        that has not completed a checkpoint yet (it starts from its sources' initial offsets).
    rerun_batch
        The batch Spark will run again first, with the offsets it already logged (an attempt
        that did not complete), or None when the next batch is new.
    source_offsets
        The end offsets of checkpoint ``checkpoint_id`` as Spark logged them, one JSON text per
        source in plan order (empty for a fresh query).
    storage
        How the checkpoint location is reached (object stores). Never serialised: it may hold
        credentials.
    """

    checkpoint_location: str
    checkpoint_id: int | None
    rerun_batch: int | None
    source_offsets: tuple[str, ...]
    storage: StorageOptions = field(default=StorageOptions(), compare=False, repr=False)

    def checkpoint(self) -> SparkCheckpoint:
        """The checkpoint location, reachable with :attr:`storage`."""
        return SparkCheckpoint(self.checkpoint_location, self.storage)

    @property
    def next_batch(self) -> int:
        """The id of the first batch the restored query runs."""
        return 0 if self.checkpoint_id is None else self.checkpoint_id + 1

    def to_json(self) -> dict[str, object]:
        """A JSON-ready form (handed to the query's sources; logs)."""
        return {
            "checkpointLocation": self.checkpoint_location,
            "checkpoint": self.checkpoint_id,
            "rerunBatch": self.rerun_batch,
            "sourceOffsets": list(self.source_offsets),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> RestorePoint:
        """Read :meth:`to_json`'s form."""
        checkpoint, rerun = value.get("checkpoint"), value.get("rerunBatch")
        return cls(
            str(value.get("checkpointLocation", "")),
            None if checkpoint is None else int(checkpoint),
            None if rerun is None else int(rerun),
            tuple(str(offset) for offset in value.get("sourceOffsets", [])),
        )


RestoreHandler = Callable[[RestorePoint], None]
"""``handler(point)``: the query is about to resume from ``point`` (driver, before each start)."""


def logged_offsets(checkpoint: SparkCheckpoint, batch_id: int) -> tuple[str, ...]:
    """The end offsets Spark logged for ``batch_id``, one JSON text per source (driver)."""
    # offsets/N: a version line ("v1"), a metadata JSON line, then one line per source.
    data = checkpoint.child("offsets", str(batch_id)).read_bytes()
    if data is None:
        return ()
    lines = data.decode("utf-8").splitlines()
    return tuple(line for line in lines[2:] if line.strip())


def restore_point(checkpoint: SparkCheckpoint) -> RestorePoint:
    """The checkpoint a query on ``checkpoint`` resumes from if it starts now (driver)."""
    committed = checkpoint.latest_committed()
    logged = checkpoint.logged_batches()
    next_batch = 0 if committed is None else committed + 1
    rerun = next_batch if next_batch in logged else None
    offsets = () if committed is None else logged_offsets(checkpoint, committed)
    return RestorePoint(checkpoint.location, committed, rerun, offsets, checkpoint.options)


def load_restore_handlers() -> dict[str, RestoreHandler]:
    """The installed restore handlers by component name."""
    return {entry.name: entry.load() for entry in entry_points(group=RESTORE_GROUP)}


def notify_restore(point: RestorePoint, handlers: dict[str, RestoreHandler]) -> None:
    """Tell every handler where the query resumes (driver, before an attempt starts).

    A handler failure propagates: starting the query anyway could publish or skip data the
    handler was about to put right.
    """
    if not Location(point.checkpoint_location, point.storage).exists():
        return  # a new query: nothing to restore
    for name, handler in sorted(handlers.items()):
        _log.info(
            "restore %s of %s: %s", name, point.checkpoint_location, json.dumps(point.to_json())
        )
        handler(point)
