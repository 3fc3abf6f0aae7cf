"""Reading Spark's streaming checkpoint directory.

Spark writes, per query, ``<checkpointLocation>/metadata`` (``{"id": "<query id>"}``, stable across
restarts), ``offsets/<N>`` (the write-ahead log of batch N's offsets) and ``commits/<N>`` (batch N
is complete: checkpoint N). Pure Python, local file system; runs wherever it is called (driver
processes, executors, tools).
"""

from __future__ import annotations

import json
import os

from spark_ckpt.errors import CheckpointLocationError
from spark_ckpt.state.files import local_path, numbered_files

__all__ = ["SparkCheckpoint"]


class SparkCheckpoint:
    """A view of one query's checkpoint location.

    Parameters
    ----------
    location
        The query's ``checkpointLocation`` (a local path or ``file:`` URI).
    """

    def __init__(self, location: str) -> None:
        self.location = local_path("checkpointLocation", location)

    def path(self, *parts: str) -> str:
        """A path inside the checkpoint location."""
        return os.path.join(self.location, *parts)

    def query_id(self) -> str:
        """The query id from ``metadata`` (stable across restarts of the query).

        Raises
        ------
        CheckpointLocationError
            When the metadata file is missing or unreadable.
        """
        path = self.path("metadata")
        try:
            with open(path, encoding="utf-8") as handle:
                return str(json.loads(handle.readline())["id"])
        except FileNotFoundError as e:
            raise CheckpointLocationError(
                f"{path} does not exist: {self.location!r} is not (yet) a Spark streaming "
                f"checkpoint location"
            ) from e
        except (OSError, ValueError, KeyError) as e:
            raise CheckpointLocationError(f"cannot read the query id from {path}: {e}") from e

    def committed(self, batch_id: int) -> bool:
        """True when ``commits/<batch_id>`` exists: checkpoint ``batch_id`` is complete."""
        return os.path.exists(self.path("commits", str(batch_id)))

    def committed_batches(self) -> list[int]:
        """Batch ids with a commit file, ascending."""
        return numbered_files(self.path("commits"))

    def logged_batches(self) -> list[int]:
        """Batch ids with an offset-log entry, ascending."""
        return numbered_files(self.path("offsets"))

    def latest_committed(self) -> int | None:
        """The newest complete checkpoint (batch id), or None."""
        batches = self.committed_batches()
        return batches[-1] if batches else None
