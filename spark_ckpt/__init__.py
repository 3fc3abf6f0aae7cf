"""spark-ckpt: Flink-grade checkpoint control for Spark Structured Streaming.

The public API is re-exported here; every other module is an implementation detail.
"""

from __future__ import annotations

from spark_ckpt.availability import (
    AVAILABLE,
    AvailabilityStatus,
    CheckpointAvailabilityProvider,
    SnapshotAvailability,
)
from spark_ckpt.control import Control, install
from spark_ckpt.history import CheckpointRecord
from spark_ckpt.hooks import CheckpointHook
from spark_ckpt.restore import RestorePoint
from spark_ckpt.session import local_session

__all__ = [
    "AVAILABLE",
    "AvailabilityStatus",
    "CheckpointAvailabilityProvider",
    "CheckpointHook",
    "CheckpointRecord",
    "Control",
    "RestorePoint",
    "SnapshotAvailability",
    "install",
    "local_session",
]

__version__ = "0.1.0"
