"""The ``delta-2pc`` options, parsed once into a typed, frozen, self-validating config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from spark_ckpt.errors import ConfigError, InvalidOptionError, UnknownOptionError
from spark_ckpt.model.durations import parse_duration
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
_OPTION_NAMES = {name.lower(): name for name in _NAMES}
# Options Spark itself adds for every streaming sink (DataStreamWriter.queryName(...)).
_SPARK_OPTIONS = {"queryname"}
_SIZE = re.compile(r"^\s*(\d+)\s*(b|k|kb|m|mb|g|gb)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
}


def _size(raw: str) -> int:
    match = _SIZE.match(raw)
    if match is None or int(match.group(1)) < 1:
        raise InvalidOptionError(
            "targetFileSize", raw, "a positive size in bytes, optionally with k, m or g (128m)"
        )
    return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]


def _bool(option: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidOptionError(option, raw, "true or false")
    return value == "true"


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
        lowered = {k.lower(): v for k, v in options.items()}
        for key in lowered:
            if key not in _OPTION_NAMES and key not in _SPARK_OPTIONS:
                raise UnknownOptionError(key, "delta-2pc", list(_NAMES))
        path = lowered.get("path")
        if not path:
            raise ConfigError(
                "delta-2pc needs the option 'path': the Delta table's location "
                "(.option('path', '/lake/table') or .start('/lake/table'))"
            )
        checkpoint = lowered.get("checkpointlocation")
        if not checkpoint:
            raise ConfigError(
                "delta-2pc needs the query's checkpoint location as a writer option: "
                ".option('checkpointLocation', '/ckpt/query'). It holds the pre-commit manifests "
                "and proves when a batch is complete (spark.sql.streaming.checkpointLocation "
                "alone is not passed to Python sinks)"
            )
        columns = tuple(c.strip() for c in lowered.get("partitionby", "").split(",") if c.strip())
        if len(set(columns)) != len(columns):
            raise InvalidOptionError("partitionBy", lowered["partitionby"], "distinct column names")
        grace = 3600.0
        if "orphangraceperiod" in lowered:
            grace = parse_duration(
                lowered["orphangraceperiod"], key="option 'orphanGracePeriod'", default_unit="s"
            )
        return cls(
            path=local_path("path", path),
            checkpoint_location=local_path("checkpointLocation", checkpoint),
            partition_by=columns,
            target_file_size=_size(lowered["targetfilesize"])
            if "targetfilesize" in lowered
            else 128 << 20,
            merge_schema=_bool("mergeSchema", lowered.get("mergeschema", "false")),
            orphan_grace_period=grace,
        )
