"""Reading Spark's streaming checkpoint directory.

Spark writes, per query, ``<checkpointLocation>/metadata`` (``{"id": "<query id>"}``, stable across
restarts), ``offsets/<N>`` (the write-ahead log of batch N's offsets) and ``commits/<N>`` (batch N
is complete: checkpoint N). Pure Python over the storage layer (a local path or an object store);
runs wherever it is called (driver processes, executors, tools).
"""

from __future__ import annotations

import json

from spark_ckpt.errors import CheckpointLocationError, StorageError
from spark_ckpt.state.storage import Location, StorageOptions

__all__ = ["SparkCheckpoint", "numbered"]


def numbered(location: Location, suffix: str = "") -> list[int]:
    """The N of every file ``<N><suffix>`` directly in ``location``, ascending ([] if missing).

    Spark's ``offsets/N`` and ``commits/N``, hook records ``N.json``.
    """
    stems = (
        e.name[: len(e.name) - len(suffix)] for e in location.list() if e.name.endswith(suffix)
    )
    return sorted(int(stem) for stem in stems if stem.isdigit())


class SparkCheckpoint:
    """A view of one query's checkpoint location.

    Parameters
    ----------
    location
        The query's ``checkpointLocation``: a local path, ``file:`` URI or object-store URI.
    options
        How to reach it (object stores).
    """

    def __init__(self, location: str | Location, options: StorageOptions | None = None) -> None:
        self.root = (
            location
            if isinstance(location, Location)
            else Location(location, options or StorageOptions())
        )
        self.location = self.root.uri
        """The location as the user wrote it (for messages)."""

    @property
    def options(self) -> StorageOptions:
        """How the location is reached."""
        return self.root.options

    def child(self, *parts: str) -> Location:
        """A location inside the checkpoint location."""
        return self.root.child(*parts)

    def query_id(self) -> str:
        """The query id from ``metadata`` (stable across restarts of the query).

        Raises
        ------
        CheckpointLocationError
            When the metadata file is missing or unreadable.
        """
        metadata = self.child("metadata")
        try:
            data = metadata.read_bytes()
        except StorageError as e:
            raise CheckpointLocationError(f"cannot read the query id: {e}") from e
        if data is None:
            raise CheckpointLocationError(
                f"{metadata} does not exist: {self.location!r} is not (yet) a Spark streaming "
                f"checkpoint location"
            )
        try:
            return str(json.loads(data.decode("utf-8").splitlines()[0])["id"])
        except (ValueError, KeyError, IndexError) as e:
            raise CheckpointLocationError(f"cannot read the query id from {metadata}: {e}") from e

    def committed(self, batch_id: int) -> bool:
        """True when ``commits/<batch_id>`` exists: checkpoint ``batch_id`` is complete."""
        return self.child("commits", str(batch_id)).exists()

    def committed_batches(self) -> list[int]:
        """Batch ids with a commit file, ascending."""
        return numbered(self.child("commits"))

    def logged_batches(self) -> list[int]:
        """Batch ids with an offset-log entry, ascending."""
        return numbered(self.child("offsets"))

    def latest_committed(self) -> int | None:
        """The newest complete checkpoint (batch id), or None."""
        batches = self.committed_batches()
        return batches[-1] if batches else None
