"""The sink's completion hook: publish when the control plane sees a checkpoint complete."""

from __future__ import annotations

from spark_ckpt.checkpoint_dir import SparkCheckpoint
from spark_ckpt.registry import Registration

from .manifest import ManifestStore
from .publisher import publish_completed

__all__ = ["publish_on_completion"]


def publish_on_completion(registration: Registration, batch_id: int | None) -> None:
    """Publish up to ``batch_id`` (everything complete when None); driver, listener thread."""
    settings = registration.settings
    store = ManifestStore(SparkCheckpoint(settings["checkpointLocation"]))
    publish_completed(store, settings["path"], upto=batch_id)
