"""The sink's control-plane callbacks: publish on completion, put things right on restore."""

from __future__ import annotations

from spark_ckpt.state.registry import Registration
from spark_ckpt.state.restore import RestorePoint
from spark_ckpt.state.storage import Location

from .manifest import ManifestStore
from .publisher import discard_after, publish_completed

__all__ = ["publish_on_completion", "restore_to_checkpoint"]


def publish_on_completion(
    registration: Registration, batch_id: int | None, run_id: str | None = None
) -> None:
    """Publish up to ``batch_id`` (everything complete when None); driver, listener thread.

    ``run_id`` is the run the event came from: a stale run is fenced off.
    """
    store = ManifestStore(registration.checkpoint())
    table = Location(registration.table, registration.storage)
    publish_completed(store, table, upto=batch_id, run=run_id)


def restore_to_checkpoint(point: RestorePoint) -> None:
    """The query resumes from ``point``: publish up to it, discard staged work after it.

    Runs on the driver before a supervised attempt starts (FLINK-20396: restoring checkpoint C
    implies C completed). Nothing to do when the checkpoint location has no ``delta-2pc`` state.
    """
    store = ManifestStore(point.checkpoint())
    recorded = store.table()
    if recorded is None:
        return
    table = Location(recorded, point.storage)
    if point.checkpoint_id is not None:
        publish_completed(store, table, upto=point.checkpoint_id)
    discard_after(store, table, point.checkpoint_id)
