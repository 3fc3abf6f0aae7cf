"""Staging: executors write Parquet files under the table root, invisible until published.

A staged file is an ordinary Parquet file in the table's directory tree (Hive-style partition
directories included), but no Delta version references it, so no reader sees it. Its name carries
the query id and batch id (:func:`staged_name`), which is how recovery recognises the sink's own
files and never touches anyone else's. Before a file is created, an *intent* naming it is written
into the checkpoint location, so the driver can find and delete the files of a failed attempt
without listing the table. Files are written through the storage layer: on an object store each
is one multipart upload that appears whole when it is closed.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.parquet as pq

from spark_ckpt.state.storage import Location

from .stats import StatsCollector

__all__ = [
    "StagedFile",
    "StagingWriter",
    "discard_staged",
    "hive_partition_value",
    "parse_staged_name",
    "staged_location",
    "staged_name",
    "write_staged_file",
]

_NAME = re.compile(
    r"^part-\d{5}-d2pc-(?P<query>[0-9a-f-]{36})-b(?P<batch>\d+)-[0-9a-f]{32}\.snappy\.parquet$"
)
_HIVE_DEFAULT = "__HIVE_DEFAULT_PARTITION__"
# Characters Hive escapes in partition directory names.
_HIVE_UNSAFE = set("\"#%'*/:=?\\\x7f{[]^") | {chr(c) for c in range(0x20)}


def staged_name(query_id: str, batch_id: int, partition_id: int) -> str:
    """A fresh file name that identifies the sink's query and batch."""
    return (
        f"part-{partition_id % 100000:05d}-d2pc-{query_id}-b{batch_id}-{uuid.uuid4().hex}"
        ".snappy.parquet"
    )


def parse_staged_name(name: str) -> tuple[str, int] | None:
    """``(query id, batch id)`` of a staged file name, or None for anyone else's file."""
    match = _NAME.match(name)
    return (match.group("query"), int(match.group("batch"))) if match else None


def hive_partition_value(value: Any) -> str | None:
    """Delta's string form of a partition value (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _hive_escape(text: str) -> str:
    return "".join(f"%{ord(c):02X}" if c in _HIVE_UNSAFE else c for c in text)


@dataclass(frozen=True)
class StagedFile:
    """One staged Parquet file, as the commit message and the manifest carry it.

    Attributes
    ----------
    path
        Path relative to the table root, URL-encoded as Delta's ``add.path``.
    size
        Bytes.
    rows
        Row count.
    partition_values
        Partition column to Delta string value (None for null).
    stats
        Delta statistics JSON.
    modification_time
        File modification time, epoch milliseconds.
    """

    path: str
    size: int
    rows: int
    partition_values: dict[str, str | None]
    stats: str
    modification_time: int

    def to_json(self) -> dict[str, Any]:
        """Render for the manifest."""
        return {
            "path": self.path,
            "size": self.size,
            "rows": self.rows,
            "partitionValues": self.partition_values,
            "stats": self.stats,
            "modificationTime": self.modification_time,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> StagedFile:
        """Parse :meth:`to_json` output."""
        return cls(
            value["path"],
            int(value["size"]),
            int(value["rows"]),
            dict(value["partitionValues"]),
            value["stats"],
            int(value["modificationTime"]),
        )


class _OpenFile:
    def __init__(
        self,
        target: Location,
        rel_path: str,
        schema: pa.Schema,
        partition_values: dict[str, str | None],
    ) -> None:
        self.rel_path = rel_path
        self.partition_values = partition_values
        self.handle = target.open_output()
        self.writer = pq.ParquetWriter(self.handle, schema, compression="snappy")
        self.stats = StatsCollector(schema)

    def write(self, batch: pa.RecordBatch) -> int:
        self.writer.write_batch(batch)
        self.stats.add(batch)
        return self.handle.tell()

    def close(self) -> StagedFile:
        self.writer.close()
        size = self.handle.tell()
        self.handle.close()  # locally fsynced; on an object store the upload completes here
        return StagedFile(
            self.rel_path,
            size,
            self.stats.rows,
            self.partition_values,
            self.stats.to_json(),
            int(time.time() * 1000),
        )


def staged_location(root: Location, path: str) -> Location:
    """Where a file of the table at ``root`` is, from its Delta ``add.path`` (URL-encoded).

    A relative path is below the root; an absolute URI (a file added by another writer) is used
    as it is, with the root's storage options.
    """
    if "://" in path:
        return Location(path, root.options)
    return root.child(*unquote(path).split("/"))


def discard_staged(root: Location, staged: Iterable[StagedFile]) -> None:
    """Delete the files of the table at ``root`` a commit will not add (it lost a race, or failed).

    Runs on the driver, once per discarded plan. A file already gone is no error.
    """
    for file in staged:
        with contextlib.suppress(OSError):
            staged_location(root, file.path).delete()


def write_staged_file(root: Location, rel_path: str, rows: pa.Table) -> StagedFile:
    """Write ``rows`` as one unpartitioned staged file at ``rel_path`` under ``root``.

    Runs wherever a whole file's rows are at hand (the mirror's rewrite on the driver).
    ``rel_path`` is plain (not URL-encoded); the returned file's ``path`` is encoded as Delta's.
    """
    rel_uri = "/".join(quote(part, safe="=") for part in rel_path.split("/"))
    output = _OpenFile(root.child(*rel_path.split("/")), rel_uri, rows.schema, {})
    try:
        for batch in rows.to_batches():
            output.write(batch)
    except BaseException:
        with contextlib.suppress(OSError):
            output.handle.close()
        raise
    return output.close()


class StagingWriter:
    """Writes one task's record batches as staged Parquet files (executor, once per task).

    Parameters
    ----------
    table_root
        The Delta table's location.
    partition_by
        Partition columns; they become directories and are not stored in the files.
    target_file_size
        Roll to a new file once a file reaches this many bytes.
    query_id, batch_id, partition_id
        Identify the files (see :func:`staged_name`).
    intents_dir
        Where in the checkpoint location an intent is written before each file.
    """

    def __init__(
        self,
        table_root: Location,
        partition_by: Sequence[str],
        target_file_size: int,
        query_id: str,
        batch_id: int,
        partition_id: int,
        intents_dir: Location,
    ) -> None:
        self._root = table_root
        self._partition_by = list(partition_by)
        self._target = target_file_size
        self._query_id = query_id
        self._batch_id = batch_id
        self._partition_id = partition_id
        self._intents_dir = intents_dir
        self._open: dict[tuple[str | None, ...], _OpenFile] = {}
        self.staged: list[StagedFile] = []

    def _new_file(self, key: tuple[str | None, ...], schema: pa.Schema) -> _OpenFile:
        name = staged_name(self._query_id, self._batch_id, self._partition_id)
        dirs = [
            f"{_hive_escape(col)}={_HIVE_DEFAULT if v is None else _hive_escape(v)}"
            for col, v in zip(self._partition_by, key, strict=True)
        ]
        rel = "/".join([*dirs, name])
        # An intent before the file exists: a crash now leaves nothing the driver cannot find.
        self._intents_dir.child(name + ".intent").write_bytes(rel.encode())
        rel_uri = "/".join(quote(part, safe="=") for part in rel.split("/"))
        values = dict(zip(self._partition_by, key, strict=True))
        return _OpenFile(self._root.child(*rel.split("/")), rel_uri, schema, values)

    def _split(
        self, batch: pa.RecordBatch
    ) -> Iterator[tuple[tuple[str | None, ...], pa.RecordBatch]]:
        if not self._partition_by:
            yield (), batch
            return
        keys = [batch.column(c).to_pylist() for c in self._partition_by]
        data = batch.drop_columns(self._partition_by)
        combos = list(zip(*keys, strict=True))
        if len(set(combos)) == 1:
            yield tuple(hive_partition_value(v) for v in combos[0]), data
            return
        groups: dict[tuple[Any, ...], list[int]] = {}
        for index, combo in enumerate(combos):
            groups.setdefault(combo, []).append(index)
        for combo, indexes in groups.items():
            yield (
                tuple(hive_partition_value(v) for v in combo),
                data.take(pa.array(indexes, type=pa.int64())),
            )

    def write(self, batches: Iterable[pa.RecordBatch]) -> list[StagedFile]:
        """Stage every batch; return the files (all closed and fsynced)."""
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                for key, part in self._split(batch):
                    current = self._open.get(key)
                    if current is None:
                        current = self._open[key] = self._new_file(key, part.schema)
                    if current.write(part) >= self._target:
                        self.staged.append(current.close())
                        del self._open[key]
            for key in list(self._open):
                self.staged.append(self._open.pop(key).close())
        except BaseException:
            for current in self._open.values():
                with contextlib.suppress(OSError):
                    current.handle.close()
            raise
        return self.staged
