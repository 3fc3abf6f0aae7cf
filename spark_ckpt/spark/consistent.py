"""``read_consistent``: every mirror table as of the same published checkpoint (driver)."""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from spark_ckpt.errors import UsageError
from spark_ckpt.state.mirrors import CHECKPOINTS_TABLE
from spark_ckpt.state.storage import Location

__all__ = ["ConsistentTables", "read_consistent"]

_log = logging.getLogger(__name__)


class ConsistentTables(dict[str, DataFrame]):
    """:func:`read_consistent`'s tables by source table name, and those being rebuilt.

    Attributes
    ----------
    rebuilding
        Tables whose mirror is being rebuilt from a new read of the source table after a
        schema change it could not follow in place -> why, and which checkpoint it shows (it
        stays as it was before the change until the rebuild is published).
    """

    rebuilding: dict[str, str]

    def __init__(self, tables: dict[str, DataFrame], rebuilding: dict[str, str]) -> None:
        super().__init__(tables)
        self.rebuilding = rebuilding


# How Spark says there is no table at a path (classic and Connect alike). DELTA_TABLE_NOT_FOUND
# is what delta-spark says while the index's first commit is being written: its `_delta_log`
# directory exists, its first version not yet (delta-rs renames the commit file into place).
_MISSING = (
    "PATH_NOT_FOUND",
    "DELTA_MISSING_DELTA_TABLE",
    "DELTA_TABLE_NOT_FOUND",
    "is not a Delta table",
)


def _table_url(root: str, relative: str) -> str:
    """``relative`` under ``root``, in the scheme the caller gave (Spark reads ``s3a://``).

    The storage layer's canonical URL is delta-rs's ``s3://``, which Spark has no file system for.
    """
    if Location(root).is_local:
        return Location(root).child(*relative.split("/")).url
    return f"{root.rstrip('/')}/{relative}"


def read_consistent(
    spark: SparkSession, root: str, checkpoint_id: int | None = None
) -> ConsistentTables:
    """Every mirror table under ``root`` as of one checkpoint, by source table name.

    Reads the root's checkpoint index (``_checkpoints``, a Delta table) and opens each mirror
    with Delta time travel at the version the index recorded for the checkpoint, so a source
    transaction that touched several tables is seen in all of them or in none. Runs on the
    driver; the DataFrames are lazy, as usual.

    A table being rebuilt after a schema change its mirror could not follow in place (see
    Schema changes in the docs) is the exception: it shows the checkpoint before the change
    until the rebuilt table is published. The result's ``rebuilding`` names such tables and
    says why, and a warning is logged.

    Parameters
    ----------
    spark
        The session (classic or Spark Connect) with delta-spark.
    root
        The mirror root (the ``path`` of the ``delta-2pc`` sink in ``mode=mirror``).
    checkpoint_id
        The checkpoint to read; None: the newest one published in every table.

    Raises
    ------
    UsageError
        When ``root`` has no checkpoint index (not a mirror root, or nothing published yet), or
        the index has no entry for ``checkpoint_id``.
    """
    index_url = _table_url(root, CHECKPOINTS_TABLE)
    try:
        index = spark.read.format("delta").load(index_url)
        if checkpoint_id is None:
            newest = index.agg(sf.max("checkpoint_id")).first()
            checkpoint_id = None if newest is None else newest[0]
    except Exception as e:  # AnalysisException, or Connect's equivalent
        if any(m in str(e) for m in _MISSING):
            raise UsageError(
                f"{root} has no checkpoint index ({CHECKPOINTS_TABLE}): it is not the root of a "
                f"delta-2pc mirror (mode=mirror), or no batch has been published yet"
            ) from e
        raise
    if checkpoint_id is None:
        return ConsistentTables({}, {})
    rows = index.where(sf.col("checkpoint_id") == checkpoint_id).collect()
    if not rows:
        raise UsageError(
            f"the checkpoint index of {root} has no entry for checkpoint {checkpoint_id}"
        )
    tables = {
        row["table"]: spark.read.format("delta")
        .option("versionAsOf", int(row["version"]))
        .load(_table_url(root, row["path"]))
        for row in sorted(rows, key=lambda r: str(r["table"]))
    }
    # Indexes written before rebuilds have no such column.
    described = [(str(row["table"]), row.asDict().get("rebuilding")) for row in rows]
    rebuilding = {table: str(why) for table, why in described if why is not None}
    for table, why in sorted(rebuilding.items()):
        _log.warning("mirror %s at checkpoint %s: %s", table, checkpoint_id, why)
    return ConsistentTables(tables, rebuilding)
