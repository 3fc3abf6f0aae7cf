"""The sink's control-plane callbacks: publish on completion, put things right on restore."""

from __future__ import annotations

from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.registry import Registration
from spark_ckpt.state.restore import RestorePoint

from .manifest import ManifestStore
from .publisher import discard_after, publish_completed

__all__ = ["publish_on_completion", "restore_to_checkpoint"]


def publish_on_completion(registration: Registration, batch_id: int | None) -> None:
    """Publish up to ``batch_id`` (everything complete when None); driver, listener thread."""
    settings = registration.settings
    store = ManifestStore(SparkCheckpoint(settings["checkpointLocation"]))
    publish_completed(store, settings["path"], upto=batch_id)


def restore_to_checkpoint(point: RestorePoint) -> None:
    """The query resumes from ``point``: publish up to it, discard staged work after it.

    Runs on the driver before a supervised attempt starts (FLINK-20396: restoring checkpoint C
    implies C completed). Nothing to do when the checkpoint location has no ``delta-2pc`` state.
    """
    store = ManifestStore(SparkCheckpoint(point.checkpoint_location))
    table = store.table()
    if table is None:
        return
    if point.checkpoint_id is not None:
        publish_completed(store, table, upto=point.checkpoint_id)
    discard_after(store, table, point.checkpoint_id)
