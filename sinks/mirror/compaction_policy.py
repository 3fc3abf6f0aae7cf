"""When and what a mirror's compaction rewrites: the policy, recorded in each batch's plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["CompactionPolicy"]


@dataclass(frozen=True)
class CompactionPolicy:
    """When and what a mirror's compaction rewrites (the sink's ``compact*`` options).

    Attributes
    ----------
    every
        After every this many batches (batch ids ``every - 1``, ``2 * every - 1``, ...), the
        tables the batch touched are compacted where they need it; 0: never after a batch.
    deleted_ratio
        A file whose deletion vector deletes this share of its rows or more is rewritten.
    min_files
        Small files (under half ``target_size``) are packed together once there are this many.
    target_size
        The size in bytes a packed file grows to (the sink's ``targetFileSize``).
    """

    every: int = 10
    deleted_ratio: float = 0.2
    min_files: int = 10
    target_size: int = 128 << 20

    def due(self, batch_id: int) -> bool:
        """Whether the publisher compacts after batch ``batch_id``."""
        return self.every > 0 and (batch_id + 1) % self.every == 0

    def to_json(self) -> dict[str, Any]:
        """Render for the manifest."""
        return {
            "every": self.every,
            "deletedRatio": self.deleted_ratio,
            "minFiles": self.min_files,
            "targetSize": self.target_size,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> CompactionPolicy:
        """Parse :meth:`to_json` output."""
        return cls(
            int(value["every"]),
            float(value["deletedRatio"]),
            int(value["minFiles"]),
            int(value["targetSize"]),
        )
