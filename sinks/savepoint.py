"""The ``delta-2pc`` sink's part in savepoints (see :mod:`spark_ckpt.state.savepoints`).

A savepoint is taken at a batch N the table already holds, so none of the sink's manifests is
needed to continue after N: the savepoint keeps only ``sink.json`` (the table), and a restore
checks the table against N before anything is copied. Registered under the entry-point group
``spark_ckpt.savepoint_participants``; runs on the driver or in the ``spark-ckpt`` command.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spark_ckpt.errors import SavepointRestoreError
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.savepoints import Savepoint, SavepointParticipant, map_path
from spark_ckpt.state.storage import Location, StorageOptions

from .manifest import ManifestStore
from .publisher import published_version

__all__ = ["DeltaSinkSavepoints"]


class DeltaSinkSavepoints(SavepointParticipant):
    """Savepoints of a checkpoint location whose query writes with ``delta-2pc``."""

    directory = "delta_2pc"

    def describe(self, checkpoint: SparkCheckpoint) -> dict[str, Any] | None:
        """The table and the newest batch it holds (None: no ``delta-2pc`` state)."""
        table = ManifestStore(checkpoint).table()
        if table is None:
            return None
        published = published_version(Location(table, checkpoint.options), checkpoint.query_id())
        return {"table": table, "published": published}

    def keeps(self, relative: str, checkpoint_id: int) -> bool:
        """Only ``sink.json``: batches up to N are published, later ones are not N's."""
        return relative == "sink.json"

    def check_restore(
        self,
        description: Mapping[str, Any],
        savepoint: Savepoint,
        mapping: Mapping[str, str],
        storage: StorageOptions,
    ) -> None:
        """Refuse a table that holds more or fewer of the query's batches than N.

        A table with none of them (a new table, or one other writers fill) is accepted: the
        restored query publishes N + 1 onwards there.
        """
        recorded = str(description["table"])
        table = Location(map_path(recorded, mapping), storage)
        version = published_version(table, savepoint.query_id)
        n = savepoint.checkpoint_id
        if version is None or version == n:
            return
        moved = "" if table.url == Location(recorded).url else f" (mapped from {recorded})"
        if version > n:
            raise SavepointRestoreError(
                f"cannot restore the savepoint at {savepoint.location} (checkpoint {n}) into "
                f"{table.url}{moved}: the table already holds the query's batches up to "
                f"{version}. Continuing after {n} would give batches {n + 1}..{version} ids the "
                f"table has already seen, so their new data would be skipped or repeated. "
                f"Either restore into a new table (a path mapping: --map {recorded}=NEW or "
                f"path_mapping={{{recorded!r}: NEW}}) or restore a savepoint taken at batch "
                f"{version} or later"
            )
        raise SavepointRestoreError(
            f"cannot restore the savepoint at {savepoint.location} (checkpoint {n}) into "
            f"{table.url}{moved}: the table holds the query's batches only up to {version}, "
            f"so batches {version + 1}..{n} would be missing. Restore into the table (or the "
            f"copy of it) that holds batch {n}, or into a new table"
        )

    def relocate(
        self,
        checkpoint: SparkCheckpoint,
        description: Mapping[str, Any],
        mapping: Mapping[str, str],
    ) -> None:
        """Record the mapped table as the one the restored checkpoint's sink writes to."""
        ManifestStore(checkpoint).relocate_table(map_path(str(description["table"]), mapping))
