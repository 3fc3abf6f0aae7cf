"""Committing deletion vectors: the one Delta log entry spark-ckpt writes itself.

delta-rs 1.6 reads deletion vectors (its scans and ``QueryBuilder`` skip the rows, and
``DeltaTable.deletion_vectors`` lists them) but its Python API cannot commit one: the
``AddAction`` that ``create_write_transaction`` takes (``deltalake.transaction``) has no
``deletionVector`` field and is committed without one, and no other call takes raw actions. So
this module writes the commit: ``_delta_log/<version>.json`` holding ``commitInfo``, ``txn(query
id, batch id)``, a ``remove`` of each changed file with its old DV and an ``add`` of the same path
with the new one (PROTOCOL.md "Add File and Remove File": a logical file is ``(path, DV
uniqueId)``), and an ``add`` per new file; protocol and metadata unchanged.

The commit is created only if absent (:meth:`Location.create_bytes`), as the protocol requires
("Creation of New Log Entries": writers must never overwrite a log entry): of publishers racing
for version v + 1, one wins, the others get :class:`CommitFailedError` exactly as from delta-rs,
re-read the table's ``txn`` version and find the batch published (``sinks/publisher.py``).

What the commit must carry and this module reads from the log for it: the changed file's ``add``
as last committed (size, partition values, the exact ``stats.numRecords`` that "Writer Requirement
for Deletion Vectors" demands, its current DV to merge with and to name in the ``remove``).
delta-rs exposes none of the raw action (``get_add_actions`` has no DV, no stats text), so the
files asked for are looked up by replaying the log from its newest classic checkpoint.

Runs on the driver (the publisher), once per batch and table.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, TableFeatures
from deltalake.exceptions import CommitFailedError

from spark_ckpt.errors import StateFormatError, TableIncompatibleError, UsageError
from spark_ckpt.state.storage import Location

from ..staging import StagedFile
from .deletion_vectors import (
    DeletedRows,
    DeletionVectorDescriptor,
    merge_deletions,
    write_deletion_vectors,
)

__all__ = [
    "DeletionCommit",
    "LogFile",
    "check_dv_writable",
    "checkpoint_if_due",
    "commit_deletions",
    "create_entry",
    "create_table",
    "enable_deletion_vectors",
    "has_deletion_vectors",
    "log_files",
    "paths_added",
    "staged_add",
    "unknown_features",
]

FEATURE = "deletionVectors"

# Writer features whose rules this writer keeps: it adds no column data of its own (so column
# rules, generated and identity columns hold as the staged files hold them), writes no
# change-data files (so changeDataFeed only while the feature is not switched on), and appends
# nothing to an append-only table (refused below when switched on).
_HONOURED = {
    FEATURE,
    "appendOnly",
    "changeDataFeed",
    "checkConstraints",
    "generatedColumns",
    "identityColumns",
    "invariants",
    "timestampNtz",
    "domainMetadata",
    "vacuumProtocolCheck",
    "variantType",
    "variantType-preview",
}
_SWITCHES = {
    "delta.appendOnly": "an append-only table takes no deletes",
    "delta.enableChangeDataFeed": "deletes would need change-data files, which it does not write",
    "delta.enableRowTracking": "row tracking needs baseRowId on every add",
}

_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")
_COMMIT = re.compile(r"^(\d{20})\.json$")


def enable_deletion_vectors(delta: DeltaTable) -> None:
    """Add the ``deletionVectors`` table feature (reader 3, writer 7) unless it is there.

    Runs on the driver, once per table. Only the feature, through delta-rs's
    ``alter.add_feature``: delta-spark reads a table's DVs whenever the feature is in its
    ``readerFeatures``; the property ``delta.enableDeletionVectors`` only makes delta-spark's own
    DELETE/UPDATE/MERGE write DVs, and setting it with delta-rs 1.6 also adds an unused
    ``variantType`` reader feature, which shuts out readers without variant support.
    """
    protocol = delta.protocol()
    if FEATURE in (protocol.reader_features or []) and FEATURE in (protocol.writer_features or []):
        return
    delta.alter.add_feature(TableFeatures.DeletionVectors, allow_protocol_versions_increase=True)


def has_deletion_vectors(delta: DeltaTable) -> bool:
    """Whether the table has the ``deletionVectors`` reader feature (its files may have DVs).

    Runs on the driver, once per batch and table: such a table is read with its DVs applied and
    its files are removed with their DVs named (:func:`commit_deletions`).
    """
    return FEATURE in (delta.protocol().reader_features or [])


def unknown_features(delta: DeltaTable) -> list[str]:
    """The table's features whose rules this writer's hand-made commits do not keep (driver)."""
    protocol = delta.protocol()
    features = set(protocol.reader_features or []) | set(protocol.writer_features or [])
    return sorted(features - _HONOURED)


def check_dv_writable(uri: str, delta: DeltaTable) -> None:
    """Refuse a table whose DV commit this writer cannot make correctly (driver, per commit).

    Raises
    ------
    TableIncompatibleError
        Without the ``deletionVectors`` feature (the message says how to add it), with a writer
        feature whose rules it does not keep (row tracking, column mapping, v2 checkpoints,
        in-commit timestamps, ...), or with one switched on that deletes cannot honour.
    """
    protocol = delta.protocol()
    readers, writers = set(protocol.reader_features or []), set(protocol.writer_features or [])
    if protocol.min_reader_version < 3 or FEATURE not in readers or FEATURE not in writers:
        raise TableIncompatibleError(
            f"the Delta table at {uri} does not have the {FEATURE} feature (protocol "
            f"{protocol.min_reader_version}/{protocol.min_writer_version}): add it first "
            f"(enable_deletion_vectors, or ALTER TABLE ... SET TBLPROPERTIES "
            f"('delta.enableDeletionVectors' = true) in Spark)"
        )
    unknown = unknown_features(delta)
    if unknown:
        raise TableIncompatibleError(
            f"the Delta table at {uri} has table feature(s) {', '.join(unknown)}, whose rules "
            f"spark-ckpt's deletion-vector commits do not keep: write to a table without them"
        )
    configuration = delta.metadata().configuration
    for key, why in _SWITCHES.items():
        if configuration.get(key, "false").lower() == "true":
            raise TableIncompatibleError(
                f"the Delta table at {uri} sets {key}=true: {why}. Unset it to apply deletes"
            )


@dataclass(frozen=True)
class LogFile:
    """A data file's ``add`` action as the log last holds it (the fields a DV commit repeats).

    Attributes
    ----------
    path
        As in the log (URL-encoded).
    size, modification_time, partition_values
        As in the ``add``.
    stats
        The statistics JSON (must hold ``numRecords`` for a DV to be added).
    deletion_vector
        The file's current DV, None when it has none.
    """

    path: str
    size: int
    modification_time: int
    partition_values: Mapping[str, str | None]
    stats: str | None
    deletion_vector: DeletionVectorDescriptor | None = None

    @property
    def num_records(self) -> int | None:
        """Rows in the data file (deleted ones included), from the statistics."""
        if not self.stats:
            return None
        value = json.loads(self.stats).get("numRecords")
        return None if value is None else int(value)

    @classmethod
    def from_action(cls, add: Mapping[str, Any]) -> LogFile:
        """From an ``add`` action (a JSON commit's, or a checkpoint row's as a dict)."""
        values = add.get("partitionValues") or {}
        if isinstance(values, list):  # a checkpoint's map column reads as (key, value) pairs
            values = dict(values)
        dv = add.get("deletionVector")
        return cls(
            path=add["path"],
            size=int(add["size"]),
            modification_time=int(add["modificationTime"]),
            partition_values=dict(values),
            stats=add.get("stats"),
            deletion_vector=None if dv is None else DeletionVectorDescriptor.from_json(dv),
        )

    def add_action(self, deletion_vector: DeletionVectorDescriptor) -> dict[str, Any]:
        """The ``add`` of this file with ``deletion_vector``.

        Its statistics keep their bounds but say ``tightBounds: false`` (PROTOCOL.md
        "Per-file Statistics"): min and max may now belong to deleted rows.
        """
        stats = json.loads(self.stats or "{}")
        stats["tightBounds"] = False
        return {
            "path": self.path,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": True,
            "stats": json.dumps(stats, separators=(",", ":")),
            "deletionVector": deletion_vector.to_json(),
        }

    def remove_action(self, now: int) -> dict[str, Any]:
        """The ``remove`` of this logical file (path and its current DV)."""
        action: dict[str, Any] = {
            "path": self.path,
            "deletionTimestamp": now,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": dict(self.partition_values),
            "size": self.size,
        }
        if self.deletion_vector is not None:
            action["deletionVector"] = self.deletion_vector.to_json()
        return action


def staged_add(staged: StagedFile, data_change: bool = True) -> dict[str, Any]:
    """The ``add`` of a new file (``data_change``: False for a compaction's, Delta's rule)."""
    return {
        "path": staged.path,
        "partitionValues": dict(staged.partition_values),
        "size": staged.size,
        "modificationTime": staged.modification_time,
        "dataChange": data_change,
        "stats": staged.stats,
    }


def log_files(table: Location, version: int, paths: Collection[str]) -> dict[str, LogFile]:
    """The live ``add`` of each of ``paths`` at ``version`` (paths not live are left out).

    Runs on the driver, once per DV commit. Replays the log from the newest complete classic
    checkpoint at or below ``version`` (its ``add`` column, then every JSON commit after it);
    reconciles per commit as PROTOCOL.md "Action Reconciliation" says: a ``remove`` of the live
    ``(path, DV)`` ends it, an ``add`` of the path replaces it.

    Raises
    ------
    StateFormatError
        When a commit between the checkpoint and ``version`` is missing (cleaned up by a
        writer that kept no checkpoint for it).
    """
    wanted = set(paths)
    log = table.child("_delta_log")
    checkpoint, parts = _newest_checkpoint(log, version)
    files: dict[str, LogFile] = {}
    if checkpoint is not None:
        for name in parts:
            adds = log.child(name).read_parquet(columns=["add"]).column("add")
            for add in _matching(adds, wanted):
                files[add["path"]] = LogFile.from_action(add)
    for commit in range(0 if checkpoint is None else checkpoint + 1, version + 1):
        data = log.child(f"{commit:020d}.json").read_bytes()
        if data is None:
            raise StateFormatError(
                f"commit {commit} of the Delta table at {table.url} is missing and no checkpoint "
                f"covers it: the log cannot be replayed to version {version}"
            )
        actions = [json.loads(line) for line in data.splitlines() if line.strip()]
        for action in actions:
            remove = action.get("remove")
            if remove and remove["path"] in files:
                dv = remove.get("deletionVector")
                gone = None if dv is None else DeletionVectorDescriptor.from_json(dv).unique_id
                live = files[remove["path"]].deletion_vector
                if gone == (None if live is None else live.unique_id):
                    del files[remove["path"]]
        for action in actions:
            add = action.get("add")
            if add and add["path"] in wanted:
                files[add["path"]] = LogFile.from_action(add)
    return files


def paths_added(table: Location, after: int, upto: int) -> set[str] | None:
    """Paths of data files added to the table after version ``after``, up to ``upto``.

    Runs on the driver, once per batch whose write tasks found its marks at ``after``. A path
    counts when a commit adds it without removing it: a new file (a batch's, a compaction's).
    A file already there whose DV a commit changed is removed and added again in that commit,
    and does not count. None when a commit in between is gone (cleaned up with the log).
    """
    log = table.child("_delta_log")
    added: set[str] = set()
    for commit in range(after + 1, upto + 1):
        data = log.child(f"{commit:020d}.json").read_bytes()
        if data is None:
            return None
        adds: set[str] = set()
        removes: set[str] = set()
        for line in data.splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                adds.add(action["add"]["path"])
            elif "remove" in action:
                removes.add(action["remove"]["path"])
        added |= adds - removes
    return added


def _newest_checkpoint(log: Location, version: int) -> tuple[int | None, list[str]]:
    """The newest checkpoint version at or below ``version`` with all its parts, and its files."""
    found: dict[tuple[int, int], list[str]] = {}
    for entry in log.list():
        match = _CHECKPOINT.match(entry.name)
        if match and int(match.group(1)) <= version:
            key = (int(match.group(1)), int(match.group(3) or 1))
            found.setdefault(key, []).append(entry.name)
    complete = [(v, names) for (v, parts), names in found.items() if len(names) == parts]
    if not complete:
        return None, []
    newest, names = max(complete)
    return newest, sorted(names)


def _matching(adds: pa.ChunkedArray, wanted: set[str]) -> Iterable[dict[str, Any]]:
    for add in adds.to_pylist():
        if add is not None and add.get("path") in wanted:
            yield add


@dataclass(frozen=True)
class DeletionCommit:
    """One batch's deletes and new files for one table: one Delta commit.

    Attributes
    ----------
    query_id, batch_id
        The ``txn`` action (app id, version).
    deletions
        Data file path (as in the log) to the rows of it to delete now (0-based positions);
        rows its current DV deletes already are merged in (unless ``merged``).
    adds
        New files (the new row versions).
    metadata
        More ``commitInfo`` entries.
    removes
        Paths (as in the log) of files removed whole, with whatever DV they have (a truncate,
        a file the compaction rewrote).
    merged
        ``deletions`` hold each file's whole DV already (the planner read the current one):
        the commit does not read it again.
    """

    query_id: str
    batch_id: int
    deletions: Mapping[str, DeletedRows]
    adds: Sequence[StagedFile] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    removes: Sequence[str] = ()
    merged: bool = False


def commit_deletions(
    table: Location,
    delta: DeltaTable,
    commit: DeletionCommit,
    files: Mapping[str, LogFile] | None = None,
) -> int:
    """Write ``commit``'s DVs and commit them against the snapshot ``delta``; the new version.

    Runs on the driver, once per batch and table. One DV file holds every changed file's new
    DV (old rows | new); a file whose rows are all deleted is removed instead. The commit is
    version ``delta.version() + 1``, created only if absent. ``files``: the ``add`` of every
    file ``commit`` changes or removes, as :func:`log_files` read it at ``delta``'s version
    (the planner's; read here when None).

    Raises
    ------
    TableIncompatibleError
        See :func:`check_dv_writable`.
    UsageError
        When a row to delete is at or past the file's ``numRecords``, or the file's
        statistics lack ``numRecords``.
    CommitFailedError
        When another commit took the version first, or a file to change is no longer live in
        the snapshot: the caller re-reads the table and re-plans (a DV file written for the
        lost try stays unreferenced, for VACUUM).
    """
    check_dv_writable(table.url, delta)
    version = delta.version()
    deletions = {path: rows for path, rows in commit.deletions.items() if rows}
    changed = set(deletions) | set(commit.removes)
    if files is None or not changed <= set(files):
        files = log_files(table, version, changed)
    missing = sorted(changed - set(files))
    if missing:
        raise CommitFailedError(
            f"file(s) {', '.join(missing)} are not live in version {version} of {table.url}: "
            f"another commit removed them; re-read the table"
        )
    now = int(time.time() * 1000)
    removes, merged = [], []
    for path, rows in deletions.items():
        file = files[path]
        records = file.num_records
        if records is None:
            raise UsageError(f"{path} in {table.url} has no numRecords statistic")
        if int(rows.indexes()[-1]) >= records:
            raise UsageError(
                f"row {int(rows.indexes()[-1])} of {path} is past its {records} rows in "
                f"{table.url}: row indexes are 0-based positions in the Parquet file"
            )
        removes.append(file.remove_action(now))
        all_rows = rows if commit.merged else merge_deletions(table, file.deletion_vector, rows)
        if len(all_rows) < records:
            merged.append((file, all_rows))
    removes += [files[path].remove_action(now) for path in commit.removes]
    adds = []
    if merged:
        descriptors = write_deletion_vectors(table, [rows for _, rows in merged])
        adds = [file.add_action(dv) for (file, _), dv in zip(merged, descriptors, strict=True)]
    adds += [staged_add(staged) for staged in commit.adds]
    info = {
        "timestamp": now,
        "operation": "MERGE",
        "operationParameters": {},
        "readVersion": version,
        "isolationLevel": "Serializable",
        "isBlindAppend": False,
        "engineInfo": "spark-ckpt delta-2pc",
        **_batch_info(commit),
    }
    actions = [
        {"commitInfo": info},
        {"txn": {"appId": commit.query_id, "version": commit.batch_id, "lastUpdated": now}},
        *({"remove": r} for r in removes),
        *({"add": a} for a in adds),
    ]
    create_entry(table, version + 1, actions)
    checkpoint_if_due(table, delta, version + 1)
    return version + 1


def _type_features(schema: Any) -> list[str]:
    """The reader-writer features the column types of ``schema`` (Delta's schema JSON) need.

    A ``timestamp_ntz`` column, at any depth, needs ``timestampNtz`` (the protocol's "Timestamp
    without timezone" feature): delta-rs and delta-spark refuse to read a table without it.
    """
    found: set[str] = set()

    def visit(kind: Any) -> None:
        if kind == "timestamp_ntz":
            found.add("timestampNtz")
        elif isinstance(kind, dict):
            for field in kind.get("fields", ()):
                visit(field.get("type"))
            for key in ("elementType", "keyType", "valueType"):
                if key in kind:
                    visit(kind[key])

    visit(schema)
    return sorted(found)


def create_table(
    table: Location,
    schema_json: str,
    commit: DeletionCommit,
    configuration: Mapping[str, str],
) -> int:
    """Create the table at ``table`` with the ``deletionVectors`` feature and ``commit``'s files.

    Runs on the driver, once per new mirror table (its first batch). Version 0 holds
    ``commitInfo``, the protocol (reader 3, writer 7, ``deletionVectors`` and what the column
    types need: ``timestampNtz``), ``metaData``
    (``schema_json``, unpartitioned, ``configuration``), ``txn(query id, batch id)`` and an
    ``add`` per file: one commit, so a table is never seen without the feature or without its
    first batch. delta-rs cannot create it so: its ``delta.enableDeletionVectors`` property adds
    an unused ``variantType`` reader feature, and adding the feature afterwards is a second
    commit a crash could separate from the first.

    Raises
    ------
    UsageError
        When ``commit`` deletes or removes anything (a new table has no files).
    CommitFailedError
        When version 0 exists already (a concurrent publisher created the table): the caller
        re-reads the table.
    """
    if commit.deletions or commit.removes:
        raise UsageError("a new table has no files to delete rows of or remove")
    now = int(time.time() * 1000)
    info = {
        "timestamp": now,
        "operation": "CREATE TABLE",
        "operationParameters": {},
        "isBlindAppend": True,
        "engineInfo": "spark-ckpt delta-2pc",
        **_batch_info(commit),
    }
    metadata = {
        "id": str(uuid.uuid4()),
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_json,
        "partitionColumns": [],
        "configuration": dict(configuration),
        "createdTime": now,
    }
    features = [FEATURE, *_type_features(json.loads(schema_json))]
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": features,
        "writerFeatures": features,
    }
    actions = [
        {"commitInfo": info},
        {"protocol": protocol},
        {"metaData": metadata},
        {"txn": {"appId": commit.query_id, "version": commit.batch_id, "lastUpdated": now}},
        *({"add": staged_add(staged)} for staged in commit.adds),
    ]
    table.child("_delta_log").make_dirs()
    create_entry(table, 0, actions)
    return 0


def _batch_info(commit: DeletionCommit) -> dict[str, Any]:
    """The ``commitInfo`` entries every spark-ckpt commit carries (``sinks/table.py``'s too)."""
    return {
        "spark-ckpt.sink": "delta-2pc",
        "spark-ckpt.queryId": commit.query_id,
        "spark-ckpt.batchId": commit.batch_id,
        "spark-ckpt.rows": sum(f.rows for f in commit.adds),
        **commit.metadata,
    }


def create_entry(table: Location, version: int, actions: Sequence[Mapping[str, Any]]) -> None:
    """Write log entry ``version`` holding ``actions``, only if absent (the commit itself).

    Raises
    ------
    CommitFailedError
        When another writer created the entry first.
    """
    entry = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
    target = table.child("_delta_log", f"{version:020d}.json")
    if not target.create_bytes(entry.encode()):
        raise CommitFailedError(
            f"version {version} of {table.url} was committed by another writer first"
        )


def checkpoint_if_due(table: Location, delta: DeltaTable, version: int) -> None:
    """Write a checkpoint at every ``delta.checkpointInterval``-th version, as delta-rs would.

    delta-rs writes it (its checkpoints carry the ``deletionVector`` of every ``add``), from a
    table object loaded at the new version.
    """
    interval = int(delta.metadata().configuration.get("delta.checkpointInterval", "100"))
    if version % interval == 0:
        DeltaTable(
            table.url, version=version, storage_options=table.delta_options()
        ).create_checkpoint()
