"""Compacting a mirror table: a Delta commit of its own, apart from the apply, never in its way.

A merge-on-read apply (:mod:`.merge_on_read`) marks replaced rows in deletion vectors and writes
each batch's new row versions to one new file: its cost follows the batch, but a long-running
mirror gathers small files and deleted rows that every full read pays for. Compaction gives reads
their speed back, as Delta's ``OPTIMIZE`` does (bin-packing small files, and purging deletion
vectors as ``REORG TABLE ... APPLY (PURGE)`` does), by a :class:`CompactionPolicy`:

- *Purge*: a file whose deletion vector deletes ``deleted_ratio`` of its rows or more is rewritten
  with its live rows alone.
- *Bin-pack*: once ``min_files`` files are smaller than half ``target_size``, they are packed
  into files of up to ``target_size`` (by their size less their deleted rows' share).
- Rows of each new file are sorted by the table's key, so its statistics stay as tight as its
  rows allow (the apply picks candidate files by them).

The compaction is one commit (``operation: OPTIMIZE``, ``dataChange: false``) without a ``txn``:
a mirror's batch versions are untouched, and readers at an older version read the same rows.
It never gets in the apply's way: it is created only if its version is absent; when another
commit took that version and touched none of its files (another table's index entry, an append
of new keys), it is committed at the next version as it is; when that commit changed one of its
files (the apply marked rows in it) or the table's schema, the compaction yields: its files are
deleted and it reports that it yielded, for the next due batch to try again. An apply that loses
its version to a compaction re-reads the table and plans again, as after any lost race.

Why not delta-rs's ``optimize.compact``: it bin-packs small files (deletion vectors applied) but
leaves a large file with most of its rows deleted as it is, and its files keep the order rows
were written in. A file a compaction writes and never commits (a kill, a yield whose deletes
failed) is not referenced by the log: ``VACUUM`` removes it, as a lost apply's files.

Runs on the driver: after every ``every``-th batch in the publisher, for the tables that batch
touched (:func:`compact_after_batch`); :func:`compact_table` compacts one table when called.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from spark_ckpt.errors import SparkCkptError
from spark_ckpt.state.storage import Location, StorageOptions

from ..staging import StagedFile, discard_staged, write_staged_file
from ..table import load_table
from .compaction_policy import CompactionPolicy
from .deletion_vectors import live_rows
from .dv_commit import (
    LogFile,
    checkpoint_if_due,
    create_entry,
    log_files,
    staged_add,
    unknown_features,
)
from .plan import MirrorPlan
from .publish import table_schema
from .rewrite import align_rows

__all__ = [
    "CompactionResult",
    "choose_bins",
    "compact_after_batch",
    "compact_table",
]

_log = logging.getLogger(__name__)

_ROW_GROUP_ROWS = 1 << 20
"""Rows per row group of a compacted file, as delta-rs writes them (arrow-rs's default): a
large file gets several, which readers decode on several cores. Smaller groups cost more than
they give: 128Ki-row groups made a 2M-row file a third larger (a dictionary per group) and
slower to read than delta-rs's own."""

_REBASES = 32
"""Newer commits a compaction steps over (each touching none of its files) before it yields."""

Outcome = Literal["committed", "nothing", "yielded", "skipped"]


@dataclass(frozen=True)
class CompactionResult:
    """What one compaction of one table did.

    Attributes
    ----------
    table
        The table's URL.
    outcome
        ``committed``; ``nothing`` (no file needed it); ``yielded`` (a newer commit changed one
        of its files or the schema; nothing was committed); ``skipped`` (a table compaction
        cannot rewrite: ``reason`` says why).
    version
        The compaction's Delta version when committed.
    files_removed, files_added
        Files the commit removed and added.
    rows
        Live rows rewritten.
    purged
        Files rewritten for their deletion vectors' share.
    reason
        Why a compaction was skipped or yielded.
    """

    table: str
    outcome: Outcome
    version: int | None = None
    files_removed: int = 0
    files_added: int = 0
    rows: int = 0
    purged: int = 0
    reason: str = ""


def _deleted_share(file: LogFile) -> float:
    records = file.num_records
    if file.deletion_vector is None or not records:
        return 0.0
    return file.deletion_vector.cardinality / records


def _first_key_min(file: LogFile, key: str | None) -> tuple[bool, Any]:
    """A sort key placing files by their first key column's minimum (files without it last)."""
    if key is None or not file.stats:
        return (True, None)
    low = json.loads(file.stats).get("minValues", {}).get(key)
    return (low is None, low)


def choose_bins(
    files: Sequence[LogFile], policy: CompactionPolicy, first_key: str | None = None
) -> list[tuple[LogFile, ...]]:
    """The groups of ``files`` to rewrite, one new file per group (pure; driver).

    Files whose deletion vectors pass ``policy.deleted_ratio`` are purged; the small files (under
    half the target size) are packed, once there are ``min_files`` of them, in the order of their
    first key column's minimum, into groups of up to ``target_size`` of live bytes. A group of
    one small file without deleted rows is left out (rewriting it would change nothing).
    """
    purge = {f.path for f in files if _deleted_share(f) >= policy.deleted_ratio}
    small = [f for f in files if f.size < policy.target_size // 2]
    if len(small) < policy.min_files:
        small = [f for f in small if f.path in purge]
    chosen = [f for f in files if f.path in purge and f not in small] + small
    chosen.sort(key=lambda f: (_first_key_min(f, first_key), f.path))
    bins: list[list[LogFile]] = []
    filled = 0.0
    for file in chosen:
        live = file.size * (1.0 - _deleted_share(file))
        if not bins or filled + live > policy.target_size:
            bins.append([])
            filled = 0.0
        bins[-1].append(file)
        filled += live
    return [tuple(b) for b in bins if len(b) > 1 or b[0].path in purge]


def _unsupported(delta: DeltaTable) -> str | None:
    """Why compaction cannot rewrite this table's files, or None."""
    unknown = unknown_features(delta)
    if unknown:
        return f"table feature(s) {', '.join(unknown)}, whose rules its commit does not keep"
    metadata = delta.metadata()
    configuration = metadata.configuration
    if configuration.get("delta.enableRowTracking", "false").lower() == "true":
        return "row tracking, which needs baseRowId on every add"
    mapping = configuration.get("delta.columnMapping.mode", "none").lower()
    if mapping != "none":
        return (
            f"delta.columnMapping.mode={mapping}: its files' column names are physical; "
            f"compact it with delta-spark's OPTIMIZE"
        )
    if metadata.partition_columns:
        return "a partitioned table: compact it with delta-spark's or delta-rs's optimize"
    return None


def compact_table(
    table: Location,
    policy: CompactionPolicy,
    key_columns: Sequence[str] = (),
    *,
    label: str = "",
) -> CompactionResult:
    """Compact the Delta table at ``table`` by ``policy``: one commit, or none.

    Runs on the driver, once per table and compaction. ``key_columns``: the rows of each new file
    are sorted by them (left in file order when empty). ``label`` names the caller in the
    commit's ``commitInfo`` (``spark-ckpt.compaction``).

    Raises
    ------
    StorageError
        When the table's files or log cannot be read or written.
    """
    if not table.creates_exclusively:
        return CompactionResult(
            table.url,
            "skipped",
            reason=f"its commit must be created only if absent, which spark-ckpt does on local "
            f"disks and S3 only, not on {table.scheme}: compact it with delta-spark's OPTIMIZE",
        )
    delta = load_table(table)
    if delta is None:
        return CompactionResult(table.url, "nothing")
    why = _unsupported(delta)
    if why is not None:
        return CompactionResult(table.url, "skipped", reason=why)
    version = delta.version()
    paths = [str(p) for p in pa.table(delta.get_add_actions(flatten=True)).column("path")]
    files = log_files(table, version, paths)
    first_key = key_columns[0] if key_columns else None
    bins = choose_bins(list(files.values()), policy, first_key)
    if not bins:
        return CompactionResult(table.url, "nothing")
    schema = table_schema(delta)
    adds: list[StagedFile] = []
    rows = 0
    try:
        for group in bins:
            parts = [align_rows(live_rows(table, f.path, f.deletion_vector), schema) for f in group]
            content = pa.concat_tables(parts)
            if key_columns and content.num_rows:
                content = content.sort_by([(k, "ascending") for k in key_columns])
            content = pa.Table.from_batches(
                content.combine_chunks().to_batches(max_chunksize=_ROW_GROUP_ROWS), schema
            )
            rows += content.num_rows
            if content.num_rows:
                name = f"part-00000-compact-{uuid.uuid4().hex}.snappy.parquet"
                adds.append(write_staged_file(table, name, content))
        removed = [f for group in bins for f in group]
        committed = _commit(table, version, removed, adds, label)
    except BaseException:
        discard_staged(table, adds)
        raise
    if committed is None:
        discard_staged(table, adds)
        return CompactionResult(
            table.url, "yielded", reason="a newer commit changed its files or the schema"
        )
    checkpoint_if_due(table, delta, committed)
    purged = sum(1 for f in removed if _deleted_share(f) >= policy.deleted_ratio)
    return CompactionResult(
        table.url, "committed", committed, len(removed), len(adds), rows, purged
    )


def _commit(
    table: Location,
    read_version: int,
    removed: Sequence[LogFile],
    adds: Sequence[StagedFile],
    label: str,
) -> int | None:
    """Commit the compaction after ``read_version``; its version, or None when it yields."""
    now = int(time.time() * 1000)
    info = {
        "timestamp": now,
        "operation": "OPTIMIZE",
        "operationParameters": {"predicate": "[]", "auto": bool(label)},
        "readVersion": read_version,
        "isolationLevel": "SnapshotIsolation",
        "isBlindAppend": False,
        "engineInfo": "spark-ckpt delta-2pc",
        "operationMetrics": {
            "numRemovedFiles": str(len(removed)),
            "numAddedFiles": str(len(adds)),
            "numDeletionVectorsRemoved": str(
                sum(1 for f in removed if f.deletion_vector is not None)
            ),
        },
        "spark-ckpt.compaction": label or "compact_table",
    }
    removes = []
    for file in removed:
        action = file.remove_action(now)
        action["dataChange"] = False
        removes.append({"remove": action})
    new = [{"add": staged_add(staged, data_change=False)} for staged in adds]
    actions = [{"commitInfo": info}, *removes, *new]
    inputs = {f.path for f in removed}
    version = read_version + 1
    for _ in range(_REBASES):
        try:
            create_entry(table, version, actions)
            return version
        except CommitFailedError:
            pass
        if _conflicts(table, version, inputs):
            _log.info("compaction of %s yields to version %d", table.url, version)
            return None
        version += 1
    return None


def _conflicts(table: Location, version: int, inputs: set[str]) -> bool:
    """Whether commit ``version`` changed one of ``inputs``, the schema or the protocol."""
    data = table.child("_delta_log", f"{version:020d}.json").read_bytes()
    if data is None:
        return True  # taken, yet unreadable (cleaned up): assume the worst
    for line in data.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "metaData" in action or "protocol" in action:
            return True
        for kind in ("remove", "add"):
            if kind in action and action[kind]["path"] in inputs:
                return True
    return False


def compact_after_batch(
    plan: MirrorPlan, storage: StorageOptions, batch_id: int
) -> list[CompactionResult]:
    """Compact the tables batch ``batch_id`` touched, when its policy says the batch is due.

    Runs on the driver, in the publisher, once per published batch (a no-op for most), after
    the batch is visible everywhere. A compaction that fails is logged as a warning and left for
    the next due batch: the batch it follows is published already, and a mirror whose
    compaction failed is still exact, only slower to read.
    """
    policy = plan.compaction
    if not policy.due(batch_id):
        return []
    root = Location(plan.root, storage)
    results = []
    for table in plan.tables:
        if table.shadow:
            continue
        location = root.child(*table.directory.split("/"))
        try:
            result = compact_table(
                location, policy, table.key_columns, label=f"after batch {batch_id}"
            )
        except (SparkCkptError, OSError) as e:
            _log.warning(
                "mirror %s: the compaction after batch %d failed (%s); the next due batch "
                "tries again",
                table.table,
                batch_id,
                e,
            )
            continue
        if result.outcome != "nothing":
            _log.info("mirror %s: compaction after batch %d: %s", table.table, batch_id, result)
        results.append(result)
    return results
