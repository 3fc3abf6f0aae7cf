"""The ``delta-2pc`` options, parsed once into a typed, frozen, self-validating config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from spark_ckpt.errors import ConfigError
from spark_ckpt.model.change_rows import CHANGES_TABLE
from spark_ckpt.model.option_types import (
    Boolean,
    Choice,
    Duration,
    Names,
    Parsed,
    Text,
)
from spark_ckpt.model.options import OptionReader, OptionSpec, declared, option_names, read_declared
from spark_ckpt.model.schema_changes import BEHAVIORS, Behavior
from spark_ckpt.model.uris import canonical_uri, check_uri, child_uri
from spark_ckpt.state.storage_options import StorageOptions, refuse_unsafe_settings

from .mirror.compaction_policy import (
    COMPACT_DELETED_RATIO,
    COMPACT_EVERY,
    COMPACT_MIN_FILES,
    TARGET_FILE_SIZE,
    CompactionPolicy,
    non_negative_int,
)

__all__ = ["MIRROR_ONLY_OPTIONS", "SINK_OPTIONS", "SinkOptions"]

Mode = Literal["append", "mirror"]
MODES: tuple[Mode, ...] = ("append", "mirror")
# Options Spark itself adds for every streaming sink (DataStreamWriter.queryName(...)).
_SPARK_OPTIONS = ("queryname",)
STORAGE_PREFIX = "storageOptions."
BEHAVIOR_PREFIX = "schemaChangeBehavior."
"""``schemaChangeBehavior.<schema.table>``: one table's schema change behavior."""
"""``storageOptions.<KEY>``: a storage option (endpoint, region, credentials) for the sink."""


def _scd(text: str) -> int:
    return int(Choice(("1", "2")).parse(text))


PATH: OptionSpec[str] = OptionSpec(
    "path",
    "the Delta table (created by the first publish; an existing table is appended to); in "
    "`mode=mirror`, the root holding one table per source table",
    Text(),
    required="the Delta table's location (.option('path', '/lake/table') or .start('/lake/table'))",
)
CHECKPOINT_LOCATION: OptionSpec[str] = OptionSpec(
    "checkpointLocation",
    "the query's checkpoint location, as a writer option (Spark passes it to Python sinks only "
    "that way)",
    Text(),
    required=".option('checkpointLocation', '/ckpt/query'). It holds the pre-commit manifests "
    "and proves when a batch is complete (spark.sql.streaming.checkpointLocation alone is not "
    "passed to Python sinks)",
)
PARTITION_BY: OptionSpec[tuple[str, ...]] = OptionSpec(
    "partitionBy",
    "comma-separated partition columns (Hive-style directories); `DataStreamWriter.partitionBy` "
    "is not visible to Python sinks",
    Names("column names"),
    default=(),
)
MERGE_SCHEMA: OptionSpec[bool] = OptionSpec(
    "mergeSchema", "allow new columns", Boolean(), default=False
)
ORPHAN_GRACE_PERIOD: OptionSpec[float] = OptionSpec(
    "orphanGracePeriod",
    "staged files of a batch Spark never completed are deleted once their intents are older "
    "than this (seconds, or Spark durations)",
    Duration(unit="s"),
    default=3600.0,
)
STORAGE: OptionSpec[str] = OptionSpec(
    STORAGE_PREFIX,
    "an object-store setting for this sink (`storageOptions.AWS_REGION`, ...), overriding the "
    "session's",
    placeholder="KEY",
)
MODE: OptionSpec[Mode] = OptionSpec(
    "mode",
    "`append`: the stream's rows into the table at `path`; `mirror`: one table per source "
    "table under the root `path`",
    Choice(MODES),
    default="append",
)
CHANGE_LOG: OptionSpec[str] = OptionSpec(
    "changeLog",
    "`mode=mirror`: where the change log of the same batches goes",
    Text(),
    default_note="`<path>/_changes`",
)
SCD: OptionSpec[int] = OptionSpec(
    "scd",
    "`mode=mirror`: `1` keeps each key's current row; `2` keeps every version, with "
    "`__start_at` / `__end_at`",
    Parsed(_scd, "one of: 1, 2", blank_is_unset=False),
    default=1,
)
SCHEMA_CHANGE_BEHAVIOR: OptionSpec[Behavior] = OptionSpec(
    "schemaChangeBehavior",
    "`mode=mirror`: what a mirror does when its source table's schema changes: `evolve` "
    "follows it, `fail` stops the query, `ignore` keeps the mirror's columns, `lenient` follows "
    "without dropping columns (see Schema changes)",
    Choice(BEHAVIORS),
    default="evolve",
)
DELETION_VECTORS: OptionSpec[bool] = OptionSpec(
    "deletionVectors",
    "`mode=mirror`: create new mirror tables with deletion vectors and apply batches by them "
    "(merge-on-read; readers need delta-spark 3.x+ or delta-rs `QueryBuilder`); `false`: "
    "copy-on-write. Existing tables keep what they have",
    Boolean(),
    default=True,
)


EXECUTOR_MARKS_MIN_FILES: OptionSpec[int] = OptionSpec(
    "executorMarksMinFiles",
    "`mode=mirror`, tables with deletion vectors: once a mirror has this many files, each write "
    "task finds the stored rows its changes replace, on its executor, and the publisher reads "
    "only the files added since; a smaller mirror's files are read by the publisher on the "
    "driver. `0`: always on the executors",
    Parsed(non_negative_int, "a whole number, 0 or more"),
    # Measured (docs/benchmarks.md): even with the publisher at 2,000 files, twice as slow at
    # 200 on the tests' cluster, where the executors share the driver's cores.
    default=1000,
)
TABLE_BEHAVIOR: OptionSpec[str] = OptionSpec(
    BEHAVIOR_PREFIX,
    "`mode=mirror`: `schemaChangeBehavior` for one source table, overriding the query's",
    placeholder="schema.table",
)

SINK_OPTIONS: tuple[OptionSpec[Any], ...] = (
    PATH,
    CHECKPOINT_LOCATION,
    PARTITION_BY,
    TARGET_FILE_SIZE,
    MERGE_SCHEMA,
    ORPHAN_GRACE_PERIOD,
    STORAGE,
    MODE,
    CHANGE_LOG,
    SCD,
    SCHEMA_CHANGE_BEHAVIOR,
    DELETION_VECTORS,
    COMPACT_EVERY,
    COMPACT_DELETED_RATIO,
    COMPACT_MIN_FILES,
    EXECUTOR_MARKS_MIN_FILES,
    TABLE_BEHAVIOR,
)
"""Every ``delta-2pc`` option, documented: the reference's table and the accepted names."""
_NAMES = option_names(SINK_OPTIONS)
MIRROR_ONLY_OPTIONS = tuple(
    spec.name
    for spec in (
        SCD,
        SCHEMA_CHANGE_BEHAVIOR,
        DELETION_VECTORS,
        COMPACT_EVERY,
        COMPACT_DELETED_RATIO,
        COMPACT_MIN_FILES,
        EXECUTOR_MARKS_MIN_FILES,
    )
)
"""Options with a value only in ``mode=mirror`` (``changeLog`` has its own message)."""


@dataclass(frozen=True)
class SinkOptions:
    """Validated options of one ``delta-2pc`` sink.

    Attributes
    ----------
    path
        The ``path`` option, canonical (absolute, ``s3://`` for ``s3a://``): in append mode the
        Delta table the stream's rows are appended to, in mirror mode the root holding one
        Delta table per source table and the checkpoint index.
    mode
        ``append`` or ``mirror``.
    change_log
        Mirror mode: where the change log of the same batches goes (``changeLog``, by default
        ``<root>/_changes``); None in append mode.
    checkpoint_location
        The query's checkpoint location: manifests live in it, and it proves completion.
    storage
        How both are reached: the session's ``spark.hadoop.fs.s3a.*`` settings (when installed
        by ``spark_ckpt.install``) overridden by ``storageOptions.<KEY>`` options.
    partition_by
        Partition columns (Hive-style directories); empty for an unpartitioned table.
    target_file_size
        Roll to a new Parquet file once a file reaches this many bytes.
    merge_schema
        Allow new columns to be added to the table's schema.
    orphan_grace_period
        Seconds after which a staged file that no manifest or Delta version references is
        deleted as an orphan of a failed attempt.
    scd
        Mirror mode: ``1`` keeps each key's current row, ``2`` every version of it, valid from
        ``__start_at`` to ``__end_at`` (null while current).
    schema_change_behavior
        Mirror mode: what a mirror does on its source table's schema change
        (:mod:`~spark_ckpt.sinks.mirror.evolution`).
    deletion_vectors
        Mirror mode: new mirror tables get deletion vectors and are applied merge-on-read
        (:mod:`~spark_ckpt.sinks.mirror.merge_on_read`).
    compact_every, compact_deleted_ratio, compact_min_files
        Mirror mode: the compaction policy (:meth:`compaction`).
    executor_marks_min_files
        Mirror mode: from how many files a mirror's replaced rows are found by the write tasks
        (:mod:`~spark_ckpt.sinks.mirror.task_marks`).
    """

    path: str
    checkpoint_location: str
    mode: Mode = declared(MODE)
    change_log: str | None = None
    partition_by: tuple[str, ...] = declared(PARTITION_BY)
    target_file_size: int = declared(TARGET_FILE_SIZE)
    merge_schema: bool = declared(MERGE_SCHEMA)
    orphan_grace_period: float = declared(ORPHAN_GRACE_PERIOD)
    storage: StorageOptions = field(default_factory=StorageOptions)
    scd: int = declared(SCD)
    schema_change_behavior: Behavior = declared(SCHEMA_CHANGE_BEHAVIOR)
    deletion_vectors: bool = declared(DELETION_VECTORS)
    compact_every: int = declared(COMPACT_EVERY)
    compact_deleted_ratio: float = declared(COMPACT_DELETED_RATIO)
    compact_min_files: int = declared(COMPACT_MIN_FILES)
    executor_marks_min_files: int = declared(EXECUTOR_MARKS_MIN_FILES)
    table_behaviors: tuple[tuple[str, Behavior], ...] = ()
    """``(schema.table lower-cased, behavior)`` for the tables with their own behavior."""

    def behavior_of(self, table: str) -> Behavior:
        """The schema change behavior of the mirror of source table ``table``."""
        return dict(self.table_behaviors).get(table.lower(), self.schema_change_behavior)

    def compaction(self) -> CompactionPolicy:
        """The mirrors' compaction policy (:mod:`~spark_ckpt.sinks.mirror.compaction`)."""
        return CompactionPolicy(
            self.compact_every,
            self.compact_deleted_ratio,
            self.compact_min_files,
            self.target_file_size,
        )

    @property
    def log_path(self) -> str:
        """The Delta table every batch is appended to: the one place the two modes differ.

        Append mode: the table at ``path``. Mirror mode: the change log, while the mirrors
        under ``path`` are applied from the same batches.
        """
        if self.mode == "mirror":
            assert self.change_log is not None
            return self.change_log
        return self.path

    @classmethod
    def parse(
        cls, options: Mapping[str, str], storage: StorageOptions | None = None
    ) -> SinkOptions:
        """Parse the options Spark passed to the sink (driver and executors).

        ``storage`` holds the session's storage settings, which ``storageOptions.<KEY>``
        options override.

        Raises
        ------
        ConfigError
            For an unknown option, a missing required one, or a bad value.
        StorageError
            For a path with a scheme no store supports.
        """
        reader = OptionReader(
            options,
            "delta-2pc",
            _NAMES,
            ignored=_SPARK_OPTIONS,
            prefixes=(STORAGE_PREFIX, BEHAVIOR_PREFIX),
        )
        path = PATH.read(reader)
        assert path is not None
        change_log = None
        if MODE.read(reader) == "mirror":
            change_log = canonical_uri(
                check_uri(CHANGE_LOG.read(reader) or child_uri(path, CHANGES_TABLE))
            )
        else:
            for name in MIRROR_ONLY_OPTIONS:
                reader.forbid(name, "no value outside mode=mirror")
            reader.forbid(
                "changeLog",
                "no value outside mode=mirror (in append mode, 'path' is the change log)",
            )
        checkpoint = CHECKPOINT_LOCATION.read(reader)
        assert checkpoint is not None
        merged = StorageOptions.of(
            (storage or StorageOptions()).as_dict(), reader.prefixed(STORAGE_PREFIX)
        )
        declared_values = read_declared(cls, reader)
        parsed = cls(
            # Canonical (absolute, s3:// for s3a://), fixed on the driver for every process.
            path=canonical_uri(check_uri(path)),
            checkpoint_location=check_uri(checkpoint),
            storage=merged,
            change_log=change_log,
            table_behaviors=_table_behaviors(reader),
            **declared_values,
        )
        refuse_unsafe_settings(parsed.log_path, parsed.storage)
        return parsed


def _table_behaviors(reader: OptionReader) -> tuple[tuple[str, Behavior], ...]:
    """The ``schemaChangeBehavior.<schema.table>`` options, checked (driver and executors)."""
    behaviors: list[tuple[str, Behavior]] = []
    for table, value in sorted(reader.prefixed(BEHAVIOR_PREFIX).items()):
        matches = [b for b in BEHAVIORS if b == value.strip().lower()]
        if not matches or "." not in table:
            raise ConfigError(
                f"delta-2pc option {BEHAVIOR_PREFIX}{table}={value!r}: name a source table as "
                f"schema.table after the dot, and give one of: {', '.join(BEHAVIORS)}"
            )
        behaviors.append((table, matches[0]))
    return tuple(behaviors)
