"""spark-ckpt: Flink-grade checkpoint control for Spark Structured Streaming.

The public API is re-exported here; every other module is an implementation detail. The pure
names (availability, failure reasons, errors, hooks, history records) import no pyspark; the
Spark-facing ones (``install``, ``Control``, ``SupervisedQuery``, ``local_session``) and those
that read and write files (hooks, history records, restore points, savepoints) are loaded on
first use (PEP 562), so ``import spark_ckpt`` stays usable and testable without a JVM, and
light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from spark_ckpt.errors import (
    ChangeDecodeError,
    ChangeLogError,
    CheckpointHookError,
    CheckpointLocationError,
    CheckpointPolicyError,
    ConfigError,
    DataLossError,
    DuplicateTransactionError,
    EventCountMismatchError,
    FencedError,
    InvalidOptionError,
    JavaNotFoundError,
    LateRecordError,
    LogOrderError,
    LogRewrittenError,
    MalformedEventError,
    MirrorChangeError,
    MirrorSchemaError,
    MissingExtraError,
    PackageResolutionError,
    PublishError,
    RepeatedSnapshotError,
    ReplicationSlotError,
    RestoreError,
    SavepointError,
    SavepointRestoreError,
    SchemaChangeError,
    SlotInvalidatedError,
    SourceConnectionError,
    SourcePathError,
    SourcePrivilegeError,
    SourceSettingError,
    SparkCkptError,
    StateFormatError,
    StorageError,
    StorageNotFoundError,
    SupervisedQueryError,
    TableCaptureError,
    TableIncompatibleError,
    UnknownOperationError,
    UnknownOptionError,
    UnsupportedChangeError,
    UnsupportedOutputModeError,
    UsageError,
)
from spark_ckpt.model.availability import (
    AVAILABLE,
    AvailabilityStatus,
    CheckpointAvailabilityProvider,
    SnapshotAvailability,
)
from spark_ckpt.model.failures import CheckpointFailure, FailureReason
from spark_ckpt.state.version import installed_version as _installed_version

if TYPE_CHECKING:
    from spark_ckpt.spark.consistent import read_consistent
    from spark_ckpt.spark.control import Control, install
    from spark_ckpt.spark.session import local_session
    from spark_ckpt.spark.supervisor import SupervisedQuery
    from spark_ckpt.state.history import CheckpointRecord
    from spark_ckpt.state.hooks import CheckpointHook
    from spark_ckpt.state.restore import RestorePoint
    from spark_ckpt.state.savepoints import Savepoint

__version__: str  # bound on first access by __getattr__ (see installed_version)

__all__ = [
    "AVAILABLE",
    "AvailabilityStatus",
    "ChangeDecodeError",
    "ChangeLogError",
    "CheckpointAvailabilityProvider",
    "CheckpointFailure",
    "CheckpointHook",
    "CheckpointHookError",
    "CheckpointLocationError",
    "CheckpointPolicyError",
    "CheckpointRecord",
    "ConfigError",
    "Control",
    "DataLossError",
    "DuplicateTransactionError",
    "EventCountMismatchError",
    "FailureReason",
    "FencedError",
    "InvalidOptionError",
    "JavaNotFoundError",
    "LateRecordError",
    "LogOrderError",
    "LogRewrittenError",
    "MalformedEventError",
    "MirrorChangeError",
    "MirrorSchemaError",
    "MissingExtraError",
    "PackageResolutionError",
    "PublishError",
    "RepeatedSnapshotError",
    "ReplicationSlotError",
    "RestoreError",
    "RestorePoint",
    "Savepoint",
    "SavepointError",
    "SavepointRestoreError",
    "SchemaChangeError",
    "SlotInvalidatedError",
    "SnapshotAvailability",
    "SourceConnectionError",
    "SourcePathError",
    "SourcePrivilegeError",
    "SourceSettingError",
    "SparkCkptError",
    "StateFormatError",
    "StorageError",
    "StorageNotFoundError",
    "SupervisedQuery",
    "SupervisedQueryError",
    "TableCaptureError",
    "TableIncompatibleError",
    "UnknownOperationError",
    "UnknownOptionError",
    "UnsupportedChangeError",
    "UnsupportedOutputModeError",
    "UsageError",
    "install",
    "local_session",
    "read_consistent",
]

# Names imported on first access, and the module that defines each: those that need pyspark,
# and those whose modules read and write files (their storage layer imports pyarrow when a file
# is touched, its state modules at once). Spark imports this package in the short Python
# processes that look the data sources up and create them, which need none of these.
_LAZY_NAMES = {
    "Control": "spark_ckpt.spark.control",
    "install": "spark_ckpt.spark.control",
    "local_session": "spark_ckpt.spark.session",
    "SupervisedQuery": "spark_ckpt.spark.supervisor",
    "read_consistent": "spark_ckpt.spark.consistent",
    "CheckpointRecord": "spark_ckpt.state.history",
    "CheckpointHook": "spark_ckpt.state.hooks",
    "RestorePoint": "spark_ckpt.state.restore",
    "Savepoint": "spark_ckpt.state.savepoints",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _installed_version()
        globals()[name] = value
        return value
    module = _LAZY_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_ckpt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | {"__version__"})
