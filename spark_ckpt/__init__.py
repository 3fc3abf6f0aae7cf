"""spark-ckpt: Flink-grade checkpoint control for Spark Structured Streaming.

The public API is re-exported here; every other module is an implementation detail.
"""

from __future__ import annotations

from spark_ckpt.model.availability import (
    AVAILABLE,
    AvailabilityStatus,
    CheckpointAvailabilityProvider,
    SnapshotAvailability,
)
from spark_ckpt.spark.control import Control, install
from spark_ckpt.spark.session import local_session
from spark_ckpt.state.history import CheckpointRecord
from spark_ckpt.state.hooks import CheckpointHook
from spark_ckpt.state.restore import RestorePoint

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
