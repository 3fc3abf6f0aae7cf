"""Pre-commit manifests: what batch N will publish, made durable before Spark completes N.

``commit(messages, N)`` (driver) writes ``<checkpointLocation>/delta_2pc/manifests/<N>.json``
atomically (temporary file, fsync, rename, fsync of the directory). The manifest lives in the
checkpoint location, so it travels with a copy of the checkpoint. Executors' staging intents live
beside it under ``staging/<N>/``.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from typing import Any

from spark_ckpt.errors import StateFormatError
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.files import numbered_files, write_atomically, write_if_changed

from .staging import StagedFile

__all__ = ["Manifest", "ManifestStore"]

_VERSION = 1


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
    """

    batch_id: int
    query_id: str
    table: str
    schema_json: str
    partition_by: tuple[str, ...]
    files: tuple[StagedFile, ...]

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
        }
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse :meth:`to_bytes` output."""
        body = json.loads(data)
        if body.get("v") != _VERSION:
            raise StateFormatError(f"unsupported manifest version {body.get('v')!r}")
        return cls(
            int(body["batchId"]),
            str(body["queryId"]),
            str(body["table"]),
            json.dumps(body["schema"]),
            tuple(body["partitionBy"]),
            tuple(StagedFile.from_json(f) for f in body["files"]),
        )


class ManifestStore:
    """The sink's state inside one checkpoint location.

    Parameters
    ----------
    checkpoint
        The query's checkpoint location.
    """

    def __init__(self, checkpoint: SparkCheckpoint) -> None:
        self.checkpoint = checkpoint
        self.root = checkpoint.path("delta_2pc")

    def record_table(self, table: str) -> None:
        """Remember the table this checkpoint's sink writes to (for restore handlers)."""
        path = os.path.join(self.root, "sink.json")
        write_if_changed(path, json.dumps({"path": table}).encode())

    def table(self) -> str | None:
        """The table recorded by :meth:`record_table`, if any."""
        try:
            with open(os.path.join(self.root, "sink.json"), encoding="utf-8") as handle:
                return str(json.load(handle)["path"])
        except FileNotFoundError:
            return None

    def manifest_path(self, batch_id: int) -> str:
        """Where batch ``batch_id``'s manifest lives."""
        return os.path.join(self.root, "manifests", f"{batch_id}.json")

    def intents_dir(self, batch_id: int) -> str:
        """Where executors record the files they are about to stage for ``batch_id``."""
        return os.path.join(self.root, "staging", str(batch_id))

    def write(self, manifest: Manifest) -> None:
        """Durably (re)place the manifest of ``manifest.batch_id``."""
        write_atomically(self.manifest_path(manifest.batch_id), manifest.to_bytes())

    def read(self, batch_id: int) -> Manifest | None:
        """The manifest of ``batch_id``, or None."""
        try:
            with open(self.manifest_path(batch_id), "rb") as handle:
                return Manifest.from_bytes(handle.read())
        except FileNotFoundError:
            return None

    def batch_ids(self) -> list[int]:
        """Batches with a manifest, ascending."""
        return numbered_files(os.path.join(self.root, "manifests"), ".json")

    def delete(self, batch_id: int) -> None:
        """Forget a manifest (published long ago, or of an aborted attempt)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.manifest_path(batch_id))

    def intents(self, batch_id: int) -> list[tuple[str, str]]:
        """``(intent file, staged file path relative to the table)`` for ``batch_id``."""
        directory = self.intents_dir(batch_id)
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if not name.endswith(".intent"):
                continue
            path = os.path.join(directory, name)
            try:
                with open(path, encoding="utf-8") as handle:
                    out.append((path, handle.read().strip()))
            except FileNotFoundError:
                continue
        return out

    def staged_batches(self) -> list[int]:
        """Batches with staging intents, ascending."""
        return numbered_files(os.path.join(self.root, "staging"))

    def drop_intents(self, batch_id: int) -> None:
        """Remove the intents of ``batch_id`` (its files are in a manifest or deleted)."""
        directory = self.intents_dir(batch_id)
        for path, _ in self.intents(batch_id):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(directory)
