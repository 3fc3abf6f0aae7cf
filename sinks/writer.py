"""The ``delta-2pc`` stream writer: stage on executors, pre-commit on the driver, publish later.

Spark's order for batch N (REFERENCE.md): executors ``write()`` (stage Parquet files), the driver
``commit(messages, N)`` (here: write N's manifest; publish earlier complete batches), then Spark
writes ``commits/N``. N itself is published by whichever trigger comes first afterwards: the next
batch's commit, the control plane's listener, or recovery when the query restarts.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from deltalake import Schema
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from spark_ckpt.errors import ConfigError, PublishError, UsageError
from spark_ckpt.model.change_rows import MIRROR_COLUMNS
from spark_ckpt.state.hooks import HookChannel
from spark_ckpt.state.registry import ControlState, Registration
from spark_ckpt.testing.faults import crash_point, stall_point

from .manifest import Manifest, ManifestStore
from .mirror.precommit import discard_staging, plan_batch
from .mirror.task_marks import TableMarks, combine, find_marks, key_sources
from .options import SinkOptions
from .places import SinkPlaces
from .publisher import clean_orphans, discard_unlisted, precommit, publish_completed
from .snapshots import check_out, give_back
from .staging import StagedFile, StagingWriter
from .table import check_writable

__all__ = ["Delta2pcStreamWriter", "StagedFiles"]

_log = logging.getLogger(__name__)


@dataclass
class StagedFiles(WriterCommitMessage):
    """One task's commit message: the files it staged (picklable)."""

    batch_id: int
    partition_id: int
    files: list[StagedFile]
    attempt: str = ""
    """The run id of the query run whose task staged the files (the batch attempt)."""
    marks: tuple[TableMarks, ...] = ()
    """Mirror mode: per table, the stored rows the task's changes replace
    (:mod:`.mirror.task_marks`)."""


def _keeping_key_sources(
    batches: Iterator[pa.RecordBatch], kept: list[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``batches`` as they are, keeping each one's key columns in ``kept`` (executor)."""
    for batch in batches:
        kept.append(key_sources(batch))
        yield batch


class Delta2pcStreamWriter(DataSourceStreamArrowWriter):
    """Two-phase-commit writer into a Delta table.

    Built by Spark on the driver when the query starts (the table is checked then, before anything
    is staged), pickled to executors for ``write``, and built again in a fresh driver process for
    every ``commit`` / ``abort``.

    Parameters
    ----------
    options
        The parsed sink options.
    schema
        The stream's schema.
    control
        The control plane's state when the sink was registered by ``spark_ckpt.install``.
    """

    def __init__(
        self, options: SinkOptions, schema: StructType, control: ControlState | None = None
    ) -> None:
        self.options = options
        self.places = SinkPlaces.of(options)
        self.control = control
        if options.mode == "mirror":
            lacking = [c for c in MIRROR_COLUMNS if c not in schema.fieldNames()]
            if lacking:
                raise ConfigError(
                    f"delta-2pc mode=mirror applies a change stream (the txn-cdc schema), but "
                    f"the stream lacks {', '.join(lacking)}. Write a txn-cdc stream, or use "
                    f"mode=append"
                )
        # Delta only distinguishes timestamps with and without a zone; the zone name is moot.
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.places.table.check_reachable()  # a typed error naming the table, before any staging
        table = check_out(self.places.table)
        try:
            partition_by = check_writable(
                self.places.table.url,
                table,
                self.arrow_schema,
                options.partition_by,
                options.merge_schema,
            )
        finally:
            give_back(self.places.table, table)
        self.partition_by = partition_by
        # The table keeps the stream's column order; partition columns are not in the files.
        self.schema_json = Schema.from_arrow(self.arrow_schema).to_json()
        self._recovered = self._recover()

    def _recover(self) -> bool:
        """Publish what completed before a restart; clean up orphans (driver, at construction).

        Spark constructs the writer when the query starts and again in every commit process, so
        complete batches left unpublished by a crash are published as soon as the query is back,
        even before it runs another batch.
        """
        store = self._store()
        store.record_table(self.options.log_path)
        if not store.checkpoint.child("commits").list():
            return False  # a new query: nothing can have completed
        published = publish_completed(store, self.places.table)
        if published:
            _log.info("delta-2pc recovered and published batches %s", published)
        clean_orphans(store, self.places.table, self.options.orphan_grace_period)
        return True

    def _store(self) -> ManifestStore:
        return ManifestStore(self.places.checkpoint)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFiles:
        """Stage this task's rows as Parquet files (executor, once per task per batch).

        In mirror mode the task also finds the stored rows its changes replace, in the mirrors
        large enough for it (:mod:`.mirror.task_marks`), and returns them with its files.
        """
        context = TaskContext.get()
        assert context is not None, "write() runs in a Spark task"
        query_id = context.getLocalProperty("sql.streaming.queryId")
        batch = context.getLocalProperty("streaming.sql.batchId")
        if query_id is None or batch is None:
            raise UsageError(
                "delta-2pc is a streaming sink: write() ran outside a streaming micro-batch "
                "(no query or batch id in the task's properties)"
            )
        batch_id = int(batch)
        # Spark runs every job of a query run in a job group named by the run id.
        attempt = context.getLocalProperty("spark.jobGroup.id") or f"task-{uuid.uuid4().hex}"
        store = self._store()
        staging = StagingWriter(
            self.places.table,
            self.partition_by,
            self.options.target_file_size,
            query_id,
            batch_id,
            context.partitionId(),
            store.intents_dir(batch_id, attempt),
        )
        mirror = self.places.mirror
        sources: list[pa.RecordBatch] = []
        if mirror is not None:
            iterator = _keeping_key_sources(iterator, sources)
        files = staging.write(iterator)
        marks: tuple[TableMarks, ...] = ()
        if mirror is not None and sources:
            marks = find_marks(
                mirror,
                pa.Table.from_batches(sources),
                self.options.scd == 2,
                self.options.executor_marks_min_files,
            )
        crash_point("after_staging", batch_id)
        stall_point("after_staging", batch_id, context.attemptNumber())
        return StagedFiles(batch_id, context.partitionId(), files, attempt, marks)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Pre-commit batch ``batchId`` and publish earlier complete batches (driver, per batch).

        ``commits/<batchId - 1>`` exists by now (Spark wrote it before starting this batch), so
        everything up to ``batchId - 1`` may be published.
        """
        store = self._store()
        files: list[StagedFile] = []
        found: list[TableMarks] = []
        attempts = set()
        for message in messages:
            if message is None:
                continue  # a failed task's message; Spark would not commit then, but be strict
            assert isinstance(message, StagedFiles)
            if message.batch_id != batchId:
                raise PublishError(f"commit message of batch {message.batch_id} in batch {batchId}")
            files += message.files
            found += message.marks
            attempts.add(message.attempt)
        if len(attempts) > 1:
            raise PublishError(f"batch {batchId}'s tasks ran in several query runs: {attempts}")
        run = attempts.pop() if attempts else None
        manifest = Manifest(
            batchId,
            store.checkpoint.query_id(),
            self.options.log_path,
            self.schema_json,
            self.partition_by,
            tuple(sorted(files, key=lambda f: f.path)),
            run or f"empty-{uuid.uuid4().hex}",
        )
        if self.control is not None:
            channel = HookChannel.for_checkpoint(self.control, self.options.checkpoint_location)
            limit = channel.wait_limit()
            if limit is not None:
                # The supervisor has checkpoint hooks: they run now, while N can still be aborted
                # (raising here fails the batch, so Spark never writes commits/N).
                channel.trigger(batchId, limit)
            # Lets the control plane's listener publish N as soon as checkpoint N completes.
            self.control.register(
                Registration(
                    "delta-2pc",
                    manifest.query_id,
                    self.options.checkpoint_location,
                    self.options.log_path,
                    self.options.storage,
                )
            )
        if run is not None:
            store.register_run(run)
        mirror = self.places.mirror
        if mirror is not None:
            if not self._recovered:
                # The plan is checked against the mirrors' schemas: they must hold N - 1 first.
                publish_completed(store, self.places.table, upto=batchId - 1, run=run)
            plan = plan_batch(
                mirror,
                self.places.table,
                manifest.files,
                manifest.query_id,
                batchId,
                manifest.attempt,
                history=self.options.scd == 2,
                behavior_of=self.options.behavior_of,
                deletion_vectors=self.options.deletion_vectors,
                compaction=self.options.compaction(),
                marks=combine(found),
            )
            manifest = dataclasses.replace(manifest, mirror=plan)
        precommit(store, manifest)
        crash_point("after_manifest", batchId)
        if not self._recovered and mirror is None:
            # This process did not just publish everything complete while constructing the
            # writer, so publish what commits/<batchId - 1> (written before this batch) allows.
            published = publish_completed(store, self.places.table, upto=batchId - 1, run=run)
            if published:
                _log.info("delta-2pc published batches %s", published)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Delete what this attempt of ``batchId`` staged (driver, when a batch fails)."""
        store = self._store()
        attempts = {m.attempt for m in messages if isinstance(m, StagedFiles)}
        attempts |= {i.attempt for i in store.intents(batchId)} if not attempts else set()
        removed = 0
        for attempt in attempts:
            # A durable manifest of this attempt is not the abort's to undo.
            removed += discard_unlisted(store, self.places.table, batchId, attempt)
            if not any(m.attempt == attempt for m in store.manifests(batchId)):
                store.drop_intents(batchId, attempt)
                if self.places.mirror is not None:
                    discard_staging(self.places.mirror, batchId, attempt)
        _log.info("delta-2pc aborted batch %d: removed %d staged files", batchId, removed)
