"""Pre-commit manifests: what batch N will publish, made durable before Spark completes N.

The sink's state lives in the checkpoint location (so it travels with a copy of it), under
``delta_2pc/``. Object stores have no rename, no lock and no append, so every object is written
whole, once, under a name no other writer uses:

``manifests/<N>/<attempt>.json``
    What attempt ``<attempt>`` (the Spark run id of the query run that executed it) of batch N
    stages, written by ``commit(messages, N)`` on the driver. Two attempts of one batch (a run
    that crashed after its pre-commit, a stale driver) never overwrite each other.
``staging/<N>/<attempt>/<file>.intent``
    Written by an executor before it creates a staged file, naming it, so a failed attempt's
    files are found without listing the table.
``runs/<start ms>-<run id>``
    Each run of the query registers here at its first pre-commit; a run that is not the newest
    is fenced off (see :mod:`.publisher`).
``sink.json``
    The table this checkpoint's sink writes to (for restore handlers).

Manifests written by earlier versions (``manifests/<N>.json``) are still read.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from spark_ckpt.errors import CheckpointLocationError, StateFormatError
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.storage import Location

from .mirror.plan import MirrorPlan
from .staging import StagedFile

__all__ = ["LEGACY_ATTEMPT", "Intent", "Manifest", "ManifestStore"]

_VERSION = 2
LEGACY_ATTEMPT = "legacy"
"""The attempt of a manifest written before attempts were recorded (``manifests/<N>.json``)."""


@dataclass(frozen=True)
class Manifest:
    """Everything needed to publish batch N, with no other input.

    Attributes
    ----------
    batch_id
        N.
    query_id
        The query's id (the Delta ``txn`` appId).
    table
        The table's location.
    schema_json
        The Delta schema of the batch's data (``deltalake.Schema.to_json()``).
    partition_by
        The table's partition columns.
    files
        The staged files.
    attempt
        Which attempt of the batch staged them (the run id of the query run).
    mirror
        In mirror mode, what publishing the batch does to the mirror tables.
    """

    batch_id: int
    query_id: str
    table: str
    schema_json: str
    partition_by: tuple[str, ...]
    files: tuple[StagedFile, ...]
    attempt: str = LEGACY_ATTEMPT
    mirror: MirrorPlan | None = None

    @property
    def rows(self) -> int:
        """Rows in the batch."""
        return sum(f.rows for f in self.files)

    def to_bytes(self) -> bytes:
        """Serialise (stable key order)."""
        body: dict[str, Any] = {
            "v": _VERSION,
            "batchId": self.batch_id,
            "queryId": self.query_id,
            "table": self.table,
            "schema": json.loads(self.schema_json),
            "partitionBy": list(self.partition_by),
            "files": [f.to_json() for f in self.files],
            "attempt": self.attempt,
        }
        if self.mirror is not None:
            body["mirror"] = self.mirror.to_json()
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse :meth:`to_bytes` output."""
        body = json.loads(data)
        if body.get("v") not in (1, _VERSION):
            raise StateFormatError(f"unsupported manifest version {body.get('v')!r}")
        return cls(
            int(body["batchId"]),
            str(body["queryId"]),
            str(body["table"]),
            json.dumps(body["schema"]),
            tuple(body["partitionBy"]),
            tuple(StagedFile.from_json(f) for f in body["files"]),
            str(body.get("attempt", LEGACY_ATTEMPT)),
            MirrorPlan.from_json(body["mirror"]) if "mirror" in body else None,
        )


@dataclass(frozen=True)
class Intent:
    """An executor's note that it is about to stage ``path`` for one attempt of a batch."""

    batch_id: int
    attempt: str
    path: str
    """The staged file's path relative to the table (not URL-encoded)."""
    location: Location
    """Where the intent itself is stored."""


class ManifestStore:
    """The sink's state inside one checkpoint location (driver; executors write intents).

    Parameters
    ----------
    checkpoint
        The query's checkpoint location.
    """

    def __init__(self, checkpoint: SparkCheckpoint) -> None:
        self.checkpoint = checkpoint
        self.root = checkpoint.child("delta_2pc")

    # -- the table ------------------------------------------------------------------------

    def record_table(self, table: str) -> None:
        """Remember the table this checkpoint's sink writes to (driver, at every writer start).

        Raises
        ------
        CheckpointLocationError
            When the checkpoint has completed batches for another table: its batch ids and
            manifests belong with that table, and publishing them to this one would skip
            batches or fail on staged files it does not have.
        """
        body = json.dumps({"path": table}).encode()
        target = self.root.child("sink.json")
        recorded = target.read_bytes()
        if recorded == body:
            return
        if recorded is not None:
            before = str(json.loads(recorded)["path"])
            same = Location(before).url == Location(table).url
            if not same and self.checkpoint.committed_batches():
                raise CheckpointLocationError(
                    f"the checkpoint location {self.checkpoint.location!r} belongs with the "
                    f"table {before!r}, but this query writes to {table!r}. Use a new "
                    f"checkpoint location for a new table, or restore a savepoint of this "
                    f"query with a path mapping {before!r} -> {table!r} (spark-ckpt savepoint "
                    f"restore --map)"
                )
        target.write_bytes(body)

    def relocate_table(self, table: str) -> None:
        """Point this checkpoint's sink at ``table`` (a savepoint restored with a path mapping)."""
        self.root.child("sink.json").write_bytes(json.dumps({"path": table}).encode())

    def table(self) -> str | None:
        """The table recorded by :meth:`record_table`, if any."""
        data = self.root.child("sink.json").read_bytes()
        return None if data is None else str(json.loads(data)["path"])

    # -- manifests ------------------------------------------------------------------------

    def _batch_dir(self, batch_id: int) -> Location:
        return self.root.child("manifests", str(batch_id))

    def write(self, manifest: Manifest) -> None:
        """Durably store ``manifest`` under its batch and attempt (one whole object)."""
        target = self._batch_dir(manifest.batch_id).child(f"{manifest.attempt}.json")
        target.write_bytes(manifest.to_bytes())

    def manifests(self, batch_id: int) -> list[Manifest]:
        """Every durable manifest of ``batch_id`` (one per attempt), by attempt name."""
        found = []
        legacy = self.root.child("manifests", f"{batch_id}.json").read_bytes()
        if legacy is not None:
            found.append(Manifest.from_bytes(legacy))
        directory = self._batch_dir(batch_id)
        for entry in directory.list():
            if entry.name.endswith(".json"):
                data = directory.child(entry.name).read_bytes()
                if data is not None:
                    found.append(Manifest.from_bytes(data))
        return found

    def batch_ids(self) -> list[int]:
        """Batches with a manifest, ascending (lists every manifest: not for each trigger)."""
        found = set()
        for entry in self.root.child("manifests").list(recursive=True):
            head = entry.name.split("/", 1)[0].removesuffix(".json")
            if head.isdigit():
                found.add(int(head))
        return sorted(found)

    def delete(self, batch_id: int) -> None:
        """Forget every manifest of ``batch_id``."""
        self.root.child("manifests", f"{batch_id}.json").delete()
        self._batch_dir(batch_id).delete_tree()

    # -- intents --------------------------------------------------------------------------

    def intents_dir(self, batch_id: int, attempt: str) -> Location:
        """Where executors of ``attempt`` record the files they are about to stage."""
        return self.root.child("staging", str(batch_id), attempt)

    def intents(self, batch_id: int, attempt: str | None = None) -> list[Intent]:
        """The intents of ``batch_id`` (of one attempt, or of all)."""
        base = self.root.child("staging", str(batch_id))
        found = []
        for entry in base.list(recursive=True):
            owner, _, name = entry.name.rpartition("/")
            if not name.endswith(".intent") or (attempt is not None and owner != attempt):
                continue
            location = base.child(entry.name)
            data = location.read_bytes()
            if data is not None:
                found.append(Intent(batch_id, owner, data.decode("utf-8").strip(), location))
        return found

    def staged_batches(self) -> list[int]:
        """Batches with staging intents, ascending."""
        found = set()
        for entry in self.root.child("staging").list(recursive=True):
            head = entry.name.split("/", 1)[0]
            if head.isdigit():
                found.add(int(head))
        return sorted(found)

    def drop_intents(self, batch_id: int, attempt: str | None = None) -> None:
        """Remove the intents of ``batch_id`` (of one attempt, or all)."""
        base = self.root.child("staging", str(batch_id))
        (base if attempt is None else base.child(attempt)).delete_tree()

    # -- runs (fencing) -------------------------------------------------------------------

    def register_run(self, run_id: str) -> None:
        """Record that run ``run_id`` of the query has started pre-committing (driver, once)."""
        runs = self.root.child("runs")
        if not any(e.name.endswith(f"-{run_id}") for e in runs.list()):
            runs.child(f"{int(time.time() * 1000):015d}-{run_id}").write_bytes(b"")

    def newest_run(self) -> str | None:
        """The run id of the newest registered run, if any."""
        names = sorted(e.name for e in self.root.child("runs").list())
        return names[-1].split("-", 1)[1] if names else None
