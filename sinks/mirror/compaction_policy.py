"""When and what a mirror's compaction rewrites: the policy, recorded in each batch's plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_ckpt.model.option_types import Parsed, PositiveInt, Size
from spark_ckpt.model.options import OptionSpec, declared

__all__ = [
    "COMPACT_DELETED_RATIO",
    "COMPACT_EVERY",
    "COMPACT_MIN_FILES",
    "TARGET_FILE_SIZE",
    "CompactionPolicy",
    "non_negative_int",
]


def non_negative_int(text: str) -> int:
    """A whole number, 0 or more (an option's parser; ValueError otherwise)."""
    value = int(text.strip())
    if value < 0:
        raise ValueError(text)
    return value


def _ratio(text: str) -> float:
    value = float(text.strip())
    if not 0.0 < value <= 1.0:
        raise ValueError(text)
    return value


# The sink's options the policy is made of (``sinks/options.py`` lists them with the rest):
# declared here so that the policy's defaults are the declarations'.
TARGET_FILE_SIZE: OptionSpec[int] = OptionSpec(
    "targetFileSize",
    "roll to a new Parquet file at this size (`b`, `k`, `m`, `g`)",
    Size(),
    default=128 << 20,
)
COMPACT_EVERY: OptionSpec[int] = OptionSpec(
    "compactEvery",
    "`mode=mirror`: after every N-th batch, compact the mirror tables it touched where they need "
    "it (deletion vectors past `compactDeletedRatio`, `compactMinFiles` small files), as a "
    "commit of its own; `0`: never",
    Parsed(non_negative_int, "0 or a positive number of batches"),
    default=10,
)
COMPACT_DELETED_RATIO: OptionSpec[float] = OptionSpec(
    "compactDeletedRatio",
    "`mode=mirror`: a compaction rewrites a file whose deletion vector deletes this share of "
    "its rows or more",
    Parsed(_ratio, "a share above 0 and at most 1 (0.2)"),
    default=0.2,
)
COMPACT_MIN_FILES: OptionSpec[int] = OptionSpec(
    "compactMinFiles",
    "`mode=mirror`: a compaction packs the files smaller than half `targetFileSize` into files "
    "of up to `targetFileSize` once there are this many",
    PositiveInt(),
    default=10,
)


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

    every: int = declared(COMPACT_EVERY)
    deleted_ratio: float = declared(COMPACT_DELETED_RATIO)
    min_files: int = declared(COMPACT_MIN_FILES)
    target_size: int = declared(TARGET_FILE_SIZE)

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
