"""The ``delta-2pc`` options, parsed once into a typed, frozen, self-validating config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from spark_ckpt.errors import ConfigError
from spark_ckpt.model.options import OptionReader
from spark_ckpt.state.files import local_path

__all__ = ["SinkOptions"]

_NAMES = (
    "path",
    "checkpointLocation",
    "partitionBy",
    "targetFileSize",
    "mergeSchema",
    "orphanGracePeriod",
)
# Options Spark itself adds for every streaming sink (DataStreamWriter.queryName(...)).
_SPARK_OPTIONS = ("queryname",)


@dataclass(frozen=True)
class SinkOptions:
    """Validated options of one ``delta-2pc`` sink.

    Attributes
    ----------
    path
        The Delta table's location (a local path or ``file:`` URI).
    checkpoint_location
        The query's checkpoint location: manifests live in it, and it proves completion.
    partition_by
        Partition columns (Hive-style directories); empty for an unpartitioned table.
    target_file_size
        Roll to a new Parquet file once a file reaches this many bytes.
    merge_schema
        Allow new columns to be added to the table's schema.
    orphan_grace_period
        Seconds after which a staged file that no manifest or Delta version references is
        deleted as an orphan of a failed attempt.
    """

    path: str
    checkpoint_location: str
    partition_by: tuple[str, ...] = ()
    target_file_size: int = 128 << 20
    merge_schema: bool = False
    orphan_grace_period: float = 3600.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Parse the options Spark passed to the sink (driver and executors).

        Raises
        ------
        ConfigError
            For an unknown option, a missing required one, or a bad value.
        """
        reader = OptionReader(options, "delta-2pc", _NAMES, ignored=_SPARK_OPTIONS)
        path = reader.required(
            "path",
            "the Delta table's location (.option('path', '/lake/table') or .start('/lake/table'))",
        )
        if reader.text("checkpointLocation") is None:
            raise ConfigError(
                "delta-2pc needs the query's checkpoint location as a writer option: "
                ".option('checkpointLocation', '/ckpt/query'). It holds the pre-commit manifests "
                "and proves when a batch is complete (spark.sql.streaming.checkpointLocation "
                "alone is not passed to Python sinks)"
            )
        checkpoint = reader.text("checkpointLocation")
        assert checkpoint is not None
        return cls(
            path=local_path("path", path),
            checkpoint_location=local_path("checkpointLocation", checkpoint),
            partition_by=reader.names("partitionBy", "column names"),
            target_file_size=reader.size("targetFileSize", 128 << 20),
            merge_schema=reader.boolean("mergeSchema", False),
            orphan_grace_period=reader.duration("orphanGracePeriod", 3600.0, default_unit="s"),
        )
