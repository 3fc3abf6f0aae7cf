"""One error tree for spark-ckpt.

Every error the project raises on purpose derives from :class:`SparkCkptError`. Each specific
error also subclasses the matching builtin (``ValueError``, ``OSError``, ``RuntimeError``) so a
caller can catch either. Messages answer three questions, as Spark's error guidelines ask: what
was wrong, where (file and line, or option and value), and how to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

__all__ = [
    "ChangeDecodeError",
    "ChangeLogError",
    "CheckpointHookError",
    "CheckpointLocationError",
    "CheckpointPolicyError",
    "ConfigError",
    "DataLossError",
    "DuplicateTransactionError",
    "EventCountMismatchError",
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
    "SavepointError",
    "SavepointRestoreError",
    "SchemaChangeError",
    "SlotInvalidatedError",
    "SourceConnectionError",
    "SourcePathError",
    "SourcePrivilegeError",
    "SourceSettingError",
    "SparkCkptError",
    "StateFormatError",
    "StorageError",
    "StorageNotFoundError",
    "SupervisedQueryError",
    "TableCaptureError",
    "TableIncompatibleError",
    "UnknownOperationError",
    "UnknownOptionError",
    "UnsupportedChangeError",
    "UnsupportedOutputModeError",
    "UsageError",
]


class SparkCkptError(Exception):
    """Root of every error raised by spark-ckpt."""


def message_in_trace(trace: str, error: type[SparkCkptError]) -> str | None:
    """The message of an ``error`` that a Python traceback in ``trace`` ends with, or None.

    A failed query's exception carries the Python worker's traceback as text; this finds a
    spark-ckpt error raised there (its last line: ``module.Class: message``).
    """
    marker = f"{error.__module__}.{error.__qualname__}: "
    at = trace.rfind(marker)
    if at < 0:
        return None
    return trace[at + len(marker) :].splitlines()[0].strip() or None


class UsageError(SparkCkptError, ValueError):
    """spark-ckpt's API was called against its contract: a bug in the calling code, not bad data.

    For example a restart strategy built with a negative delay, or an AVAILABLE answer passed
    where a decline is expected.
    """


class StateFormatError(SparkCkptError, ValueError):
    """A file or offset spark-ckpt wrote cannot be read.

    An unknown format version or a damaged record; the message names what could not be read.
    """


class JavaNotFoundError(SparkCkptError, RuntimeError):
    """No suitable Java runtime for Spark was found (Spark 4 needs 17 or 21)."""


class PackageResolutionError(SparkCkptError, RuntimeError):
    """Spark could not resolve a Maven package a session needs (Delta's jar, say) with Ivy.

    The message names the packages and quotes Ivy's lines about what could not be found or
    downloaded.
    """


class ConfigError(SparkCkptError, ValueError):
    """A configuration value (a ``spark.ckpt.*`` key or a data source option) is invalid."""


class InvalidOptionError(ConfigError):
    """A data source option has a value that is not accepted.

    Parameters
    ----------
    option
        The option's name as the user wrote it (Spark lower-cases option keys; the message
        uses the documented spelling).
    value
        The rejected value.
    expected
        What is accepted, in words (``"a positive integer"``, ``"one of: on, off"``).
    """

    def __init__(self, option: str, value: object, expected: str) -> None:
        self.option = option
        self.value = value
        self.expected = expected
        super().__init__(
            f"option {option!r} has the invalid value {value!r}: expected {expected}. "
            f"Fix the value passed with .option({option!r}, ...)."
        )


class UnknownOptionError(ConfigError):
    """A data source received an option it does not know (usually a typo)."""

    def __init__(self, option: str, source: str, known: list[str]) -> None:
        self.option = option
        self.known = sorted(known)
        by_lower = {name.lower(): name for name in self.known}
        close = difflib.get_close_matches(option.lower(), list(by_lower), n=1, cutoff=0.6)
        self.suggestion = by_lower[close[0]] if close else None
        hint = f" Did you mean {self.suggestion!r}?" if self.suggestion else ""
        super().__init__(
            f"{source} does not know the option {option!r}.{hint} "
            f"Known options: {', '.join(self.known)}. Check the spelling or remove it."
        )


class MissingExtraError(SparkCkptError, ImportError):
    """A package that one of spark-ckpt's extras installs is missing where the code runs.

    The message names what needs it, the missing module and the command that installs it
    (``pip install 'spark-ckpt[kafka]'`` for the kafka connector's client), to run where the
    driver and the executors run.

    Parameters
    ----------
    extra
        The extra's name (``kafka``).
    module
        The module that could not be imported (``confluent_kafka``).
    needed_by
        What needs it, in words (``"the kafka connector"``).
    """

    def __init__(self, extra: str, module: str, needed_by: str) -> None:
        self.extra = extra
        super().__init__(
            f"{needed_by} needs the {extra!r} extra, which is not installed here (no module "
            f"named {module!r}): pip install 'spark-ckpt[{extra}]' where the Spark driver and "
            f"the executors run",
            name=module,
        )


class StorageError(SparkCkptError, OSError):
    """A location cannot be read or written.

    An unknown scheme, an unreachable endpoint, wrong credentials, a missing bucket. The message
    names the location and what the store answered, never the credentials used.
    """


class StorageNotFoundError(StorageError, FileNotFoundError):
    """The file (object) is not there: at the open, or at a read after the open.

    A :class:`StorageError` (callers that only care that a read failed catch
    that) and a :class:`FileNotFoundError`. On an object store it also means "deleted after it
    was opened", which a local disk never shows: callers that can lose a race to a concurrent
    writer (a publisher of the same batch) catch this one, and only this one.
    """


class SourcePathError(SparkCkptError, OSError):
    """A source's input path is missing, not a directory, or unreadable."""


class ChangeLogError(SparkCkptError, ValueError):
    """The change log itself is invalid at a known place.

    Parameters
    ----------
    file
        The file that holds the bad record.
    line
        The 1-based line number of the bad record in that file.
    problem
        What is wrong with it.
    expected
        What a valid record looks like, or how to repair the log.
    """

    def __init__(self, file: str, line: int, problem: str, expected: str) -> None:
        self.file = file
        self.line = line
        self.problem = problem
        self.expected = expected
        super().__init__(f"{file}:{line}: {problem}. Expected {expected}.")


class MalformedEventError(ChangeLogError):
    """A line is not JSON, or not a Debezium change or transaction-metadata event."""


class UnknownOperationError(ChangeLogError):
    """A change event's ``op`` is not one of ``r``, ``c``, ``u``, ``d``."""


class EventCountMismatchError(ChangeLogError):
    """A transaction's ``END`` disagrees with the change events seen for it."""


class DuplicateTransactionError(ChangeLogError):
    """A transaction id was begun, ended or written to again after it was complete."""


class LateRecordError(ChangeLogError):
    """A record of a unit without an event count became visible after the unit was delivered.

    Kafka makes records visible per partition; one sent before a snapshot's last record may
    become visible after it in another partition. The ``kafka`` connector waits for that
    (``snapshotSettle``); a record later still is refused instead of delivered apart from its unit.
    """


class RepeatedSnapshotError(ChangeLogError):
    """Debezium wrote its initial snapshot again after the first one was delivered.

    Debezium repeats its snapshot when its offsets are lost or reset. Delivered after changes
    that were streamed since the first snapshot, it would put rows back that were deleted or
    changed in between; the ``debezium-json`` option ``resnapshot=accept`` delivers it anyway.
    """


class LogRewrittenError(SparkCkptError, RuntimeError):
    """The change log was modified in place behind the reader (files may only be appended or added).

    A file already read grew, shrank or disappeared, or replaying a logged offset range did not
    reproduce what was planned: the same ``(start, end)`` would no longer yield the same rows.
    """


class DataLossError(SparkCkptError, RuntimeError):
    """Records a query has not read yet are gone from the source.

    Kafka's retention deleted them, or the topic was deleted and created again; the message names
    the topic, the partition and the offsets. Raised only with ``failOnDataLoss=true`` (the
    default), as Spark's Kafka source does.
    """


class LogOrderError(SparkCkptError, RuntimeError):
    """A change-log file appeared behind the reader's position: it sorts before a file already read.

    Reading it now would deliver its changes out of order, and skipping it would lose them, so
    the query stops. The message names the file, the file it sorts before and how to name files.

    Parameters
    ----------
    file
        The late file's name.
    message
        The full explanation.
    """

    def __init__(self, file: str, message: str) -> None:
        self.file = file
        super().__init__(message)


class CheckpointLocationError(SparkCkptError, OSError):
    """A query's checkpoint location is missing, unreadable, or not what was expected."""


class TableIncompatibleError(SparkCkptError, ValueError):
    """The target Delta table cannot take this stream's data (schema or table features)."""


class MirrorSchemaError(TableIncompatibleError):
    """A mirror table cannot take a batch's columns (a changed type, a changed primary key).

    Raised in the batch's pre-commit, before Spark completes the batch: nothing of it is
    published, and the query stops until the table or the stream is fixed.
    """


class SchemaChangeError(MirrorSchemaError):
    """A source table's schema changed and the mirror's ``schemaChangeBehavior`` is ``fail``.

    The message names the table, what changed and where in the source. Raised in the batch's
    pre-commit: nothing of the batch is published, and the query stops until it is restarted
    with another behavior for that table.
    """


class MirrorChangeError(SparkCkptError, ValueError):
    """A change the mirror cannot apply: no key, or a value that does not fit its column type."""


class UnsupportedOutputModeError(ConfigError):
    """A sink was started with an output mode it does not implement (``complete``, ``update``)."""


class PublishError(SparkCkptError, RuntimeError):
    """A complete batch could not be published to the Delta table (retried on the next trigger)."""


class FencedError(PublishError):
    """A stale run of a query tried to publish after a newer run started on its checkpoint.

    Two drivers must never run one query; the older one is stopped so that only the newest
    publishes.
    """


class SupervisedQueryError(SparkCkptError, RuntimeError):
    """A supervised query failed and its restart strategy allows no more restarts.

    Parameters
    ----------
    name
        The supervised query's name.
    chain
        The failures that led to the last failover, oldest first (``CheckpointFailure``).
    reason
        Why the restart strategy gave up.
    """

    def __init__(self, name: str, chain: Sequence[object], reason: str) -> None:
        self.name = name
        self.chain = chain
        self.reason = reason
        reasons = "; ".join(str(failure) for failure in chain) or "unknown"
        super().__init__(
            f"supervised query {name!r} failed and will not be restarted ({reason}). "
            f"Reason chain: {reasons}"
        )


class CheckpointPolicyError(SparkCkptError, RuntimeError):
    """A query no supervisor watches broke the checkpoint failure policy and was stopped.

    With no builder to restart it, the query fails with this error once its counted checkpoint
    failures exceed ``spark.ckpt.tolerableFailedCheckpoints`` (or data was held back past
    ``spark.ckpt.tolerableFailureTimeout``); the message names the reason chain.
    """


class CheckpointHookError(SparkCkptError, RuntimeError):
    """A checkpoint hook failed, so its checkpoint was aborted (or could not be restored).

    Parameters
    ----------
    identifier
        The hook's identifier.
    checkpoint_id
        The checkpoint being taken or restored.
    message
        What went wrong.
    io
        True when storing or reading the hook's data failed (an I/O error, counted toward
        ``spark.ckpt.tolerableFailedCheckpoints``), False when the hook itself raised.
    """

    def __init__(self, identifier: str, checkpoint_id: int, message: str, *, io: bool) -> None:
        self.identifier = identifier
        self.checkpoint_id = checkpoint_id
        self.detail = message
        self.io = io
        super().__init__(f"checkpoint hook {identifier!r} at checkpoint {checkpoint_id}: {message}")


class RestoreError(SparkCkptError, RuntimeError):
    """A component cannot resume from the restored checkpoint without skipping or repeating data.

    For example a source whose external position is already past the restored offset. The
    message names the checkpoint, what was found and what to do.
    """


class SavepointError(SparkCkptError, RuntimeError):
    """A savepoint cannot be taken, read or restored as asked.

    For example no checkpoint is complete and published yet, the location holds no savepoint
    (or an incomplete one), or a file the savepoint lists is missing or truncated.
    """


class SavepointRestoreError(SavepointError):
    """Restoring a savepoint where asked would skip or repeat data, so nothing was restored.

    For example the target table already holds batches after the savepoint's checkpoint, or the
    target checkpoint location is not empty. The message names the choices (a new table through
    a path mapping, a newer savepoint, a new checkpoint location).
    """


class SourceConnectionError(SparkCkptError, OSError):
    """A source could not connect to its external system.

    The message names the endpoint with any password removed; secrets never reach errors.
    """


class SourceSettingError(ConfigError):
    """A source server's setting does not allow change capture as the connector needs it.

    The message names the setting, the value the server has, the value needed and how to set it
    (MySQL's ``binlog_format=ROW``, for one).
    """


class SourcePrivilegeError(SparkCkptError, PermissionError):
    """The source's user lacks a privilege the connector needs.

    The message names the privilege, what it is needed for, and the ``GRANT`` that gives it.
    """


class ReplicationSlotError(SparkCkptError, RuntimeError):
    """A PostgreSQL replication slot cannot be read (missing, another plugin or database, busy)."""


class SlotInvalidatedError(ReplicationSlotError):
    """The server invalidated a replication slot: the WAL it needed was removed.

    PostgreSQL does this to a slot that falls more than ``max_slot_wal_keep_size`` behind
    (``wal_status = 'lost'`` in ``pg_replication_slots``). The changes after the slot's position are
    gone, so nothing after the gap is published; the only way forward is a new snapshot (the
    message says how).
    """


class TableCaptureError(SparkCkptError, ValueError):
    """A table cannot be captured as asked (missing, no primary key or replica identity)."""


class ChangeDecodeError(SparkCkptError, ValueError):
    """A change from a source system could not be decoded (its plugin's output was unexpected).

    Nothing of the batch is delivered; the message shows the start of the undecodable text.
    """


class UnsupportedChangeError(SparkCkptError, ValueError):
    """A captured table saw a change the row-level output schema cannot carry.

    The mysql connector raises it for a statement that changes a captured table (it does not
    follow MySQL's DDL yet); other connectors carry a TRUNCATE as a change with ``op='t'``.
    """
