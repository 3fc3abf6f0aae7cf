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
from spark_ckpt.session import local_session

__all__ = [
    "AVAILABLE",
    "AvailabilityStatus",
    "CheckpointAvailabilityProvider",
    "Control",
    "SnapshotAvailability",
    "install",
    "local_session",
]

__version__ = "0.1.0"
