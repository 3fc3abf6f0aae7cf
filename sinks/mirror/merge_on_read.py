"""Applying one batch to a mirror table with deletion vectors: merge-on-read.

A batch's apply reads and writes in proportion to its changes, not to the files its keys sit in:

1. *Candidates*: files whose first key column's min/max statistics can hold a changed key (as
   the copy-on-write rewrite, :mod:`.rewrite`). Files the batch does not touch are never read.
2. *Marks*: the live rows (those its current deletion vector does not delete) of each candidate
   whose key the batch changes (updates, deletes, a primary-key update's old key) are added to
   its deletion vector (DV). Where the batch's write tasks found them (:mod:`.task_marks`, on
   the executors, against the table as it was then), their positions are taken as found
   (:func:`mark_positions`), and only the files added to the table since are read; otherwise
   each candidate's key columns are read here (:func:`mark_file`).
3. *New versions*: the batch's upserts go to one new file.
4. *One commit* (:func:`.dv_commit.commit_deletions`): per marked file a ``remove`` with its old
   DV and an ``add`` with the merged one, the new file, ``txn(query id, batch id)``.

The apply never rewrites a file for its deleted rows' sake: files whose DVs delete a large share
of their rows, and the small files of many batches' new versions, are rewritten by the
compaction (:mod:`.compaction`), a commit of its own. Only a file whose statistics lack
``numRecords`` (written by another engine without them) is rewritten here, as a DV needs the
file's row count.

:func:`mark_file` and :func:`mark_positions` run on the driver, in whichever process publishes
batch N.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from spark_ckpt.state.storage import Location

from ..staging import (
    StagedFile,
    discard_staged,
    staged_location,
    staged_name,
    write_staged_file,
)
from .deletion_vectors import (
    DeletedRows,
    DeletionVectorDescriptor,
    read_deletion_vector,
    read_deletion_vectors,
)
from .dv_commit import LogFile, log_files, paths_added
from .fold import ACTION, END_AT, FROM_KEY, MISSING
from .rewrite import (
    align_rows,
    candidate_files,
    close_current,
    close_times,
    fill_missing,
    key_hits,
    keys_in_range,
    old_keys,
    sorted_lookup,
)

__all__ = [
    "MARK_PATH",
    "MARK_POSITION",
    "FileMarks",
    "FoundMarks",
    "MergeOnRead",
    "mark_file",
    "mark_positions",
    "merge_on_read",
]

MARK_PATH = "_spark_ckpt_path"
"""A found mark's file: its path as in the log."""
MARK_POSITION = "_spark_ckpt_position"
"""A found mark's row: its 0-based position in its file."""


@dataclass(frozen=True)
class FoundMarks:
    """The stored rows holding a batch's keys, as its write tasks found them (:mod:`.task_marks`).

    Attributes
    ----------
    version
        The table's version they were found at: every file of it that can hold a changed key
        was looked at.
    rows
        The key columns, :data:`MARK_PATH` and :data:`MARK_POSITION` of each row found (live
        or not at ``version``).
    files_read
        Candidate files the tasks looked at.
    """

    version: int
    rows: pa.Table
    files_read: int


@dataclass(frozen=True)
class FileMarks:
    """What one batch does to one stored file (the result of :func:`mark_file`).

    Attributes
    ----------
    path
        The file's path as in the Delta log.
    deleted
        The file's whole DV after the batch (its current DV's rows and the batch's).
    marked
        How many live rows the batch deletes.
    old_rows
        The stored versions of the rows the batch deletes, every column (only when asked:
        upserts that left columns out take their values from them).
    """

    path: str
    deleted: DeletedRows
    marked: int
    old_rows: pa.Table | None = None


def _current_dv(table: Location, dv: DeletionVectorDescriptor | None) -> DeletedRows:
    return DeletedRows() if dv is None else read_deletion_vector(table, dv)


def mark_file(
    table: Location,
    path: str,
    dv: DeletionVectorDescriptor | None,
    lookup: pa.Table,
    key_columns: Sequence[str],
    with_rows: bool = False,
    current_only: bool = False,
) -> FileMarks | None:
    """The DV of the file ``path`` after deleting the live rows whose key is in ``lookup``.

    Runs on the driver today (an executor later: every argument and the result pickle), once
    per candidate file of a batch. Reads the file's key columns and its current DV; with
    ``with_rows``, the matched rows' other columns too; with ``current_only`` (SCD type 2),
    only rows whose :data:`~.fold.END_AT` is null match (a key's current version, never its
    history). None when no live row matches (the statistics allowed a changed key, the file
    holds none).

    Raises
    ------
    StorageError
        When the file or its DV cannot be read (``StorageNotFoundError``: gone, e.g. vacuumed
        while this snapshot was in use).
    """
    import pyarrow.compute as pc  # lazily: 0.1 s per process, unused by append commits

    location = staged_location(table, path)
    keys = location.read_parquet([*key_columns, END_AT] if current_only else list(key_columns))
    mask = key_hits(keys.select(list(key_columns)), lookup, key_columns)
    if current_only:
        mask = pc.and_(mask, pc.is_null(keys.column(END_AT)))
    current = _current_dv(table, dv)
    if current:
        live = np.ones(keys.num_rows, dtype=bool)
        live[current.indexes().astype(np.int64)] = False
        mask = pc.and_(mask, pa.array(live))
    positions = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    if positions.size == 0:
        return None
    old_rows = None
    if with_rows:
        # Only the row groups holding them: the file may be a compaction's, large.
        old_rows = location.read_parquet(rows=positions.tolist())
    deleted = current.union(DeletedRows.from_indexes(positions))
    return FileMarks(path, deleted, int(positions.size), old_rows)


def mark_positions(
    table: Location,
    path: str,
    dv: DeletionVectorDescriptor | None,
    positions: np.ndarray,
    with_rows: bool = False,
    current: DeletedRows | None = None,
) -> FileMarks | None:
    """The DV of the file ``path`` after deleting its rows at ``positions`` that are still live.

    Runs on the driver, once per file the batch's write tasks found changed keys in (positions
    that may repeat, and that ``dv`` may delete already). Reads the file's current DV (unless
    ``current`` holds its rows already) and, with ``with_rows``, the marked rows. None when the
    DV deletes them all (a batch published after the tasks' snapshot replaced them).
    """
    if current is None:
        current = _current_dv(table, dv)
    wanted = np.unique(positions.astype(np.int64))
    if current:
        wanted = wanted[~np.isin(wanted, current.indexes().astype(np.int64))]
    if wanted.size == 0:
        return None
    old_rows = None
    if with_rows:
        old_rows = staged_location(table, path).read_parquet(rows=wanted.tolist())
    return FileMarks(
        path, current.union(DeletedRows.from_indexes(wanted)), int(wanted.size), old_rows
    )


@dataclass
class MergeOnRead:
    """One batch's changes to one mirror table with DVs, ready for one commit.

    Attributes
    ----------
    deletions
        Data file path (as in the log) to its whole DV after the batch.
    removes
        Paths of files removed whole (truncated, or rewritten without a row count).
    adds
        New files: the batch's new row versions, rewritten files' live rows.
    files
        The ``add`` of every file in ``deletions`` and ``removes`` at the snapshot read.
    files_read
        Files whose key columns were read here (candidates by statistics).
    files_read_by_tasks
        Files whose key columns the write tasks read (0 when their marks were not used).
    rows_marked
        Stored rows the batch deleted by DV.
    files_rewritten
        Files rewritten because their statistics lack ``numRecords``.
    """

    deletions: dict[str, DeletedRows] = field(default_factory=dict)
    removes: list[str] = field(default_factory=list)
    adds: list[StagedFile] = field(default_factory=list)
    files: dict[str, LogFile] = field(default_factory=dict)
    files_read: int = 0
    files_read_by_tasks: int = 0
    rows_marked: int = 0
    files_rewritten: int = 0

    def discard(self, table: Location) -> None:
        """Delete the written files (a commit that lost a race, or failed)."""
        discard_staged(table, self.adds)


def merge_on_read(
    table: Location,
    delta: DeltaTable | None,
    folded: pa.Table,
    key_columns: Sequence[str],
    truncate: bool,
    schema: pa.Schema,
    query_id: str,
    batch_id: int,
    history: bool = False,
    found: FoundMarks | None = None,
) -> MergeOnRead:
    """Mark and stage what applies ``folded`` to the mirror at ``table`` (snapshot ``delta``).

    Runs on the driver, once per batch and table with DVs. With ``history`` (SCD type 2),
    ``folded`` holds row versions (:meth:`.fold.FoldedTable.history_arrow`): a changed key's
    current version is marked, and goes to the new file closed (its :data:`~.fold.END_AT`
    set) beside the batch's versions; its history is never touched. ``found``: the marks the
    batch's write tasks found (used unless the log since their version cannot be read, or their
    keys are not the table's). Nothing is committed; on error the files written so far are
    deleted.
    """
    result = MergeOnRead()
    try:
        _plan(
            result,
            table,
            delta,
            folded,
            key_columns,
            truncate,
            schema,
            (query_id, batch_id),
            history,
            found,
        )
    except BaseException:
        result.discard(table)
        raise
    return result


def _plan(
    result: MergeOnRead,
    table: Location,
    delta: DeltaTable | None,
    folded: pa.Table,
    key_columns: Sequence[str],
    truncate: bool,
    schema: pa.Schema,
    names: tuple[str, int],
    history: bool,
    found: FoundMarks | None,
) -> None:
    import pyarrow.compute as pc  # lazily: 0.1 s per process, unused by append commits

    query_id, batch_id = names
    live: list[dict[str, Any]] = []
    if delta is not None:
        live = pa.table(delta.get_add_actions(flatten=True)).to_pylist()
    close_at = close_times(folded, key_columns) if history else {}
    if history:
        # The keys whose current version ends: each changed key has one close row.
        keys = folded.filter(pc.equal(folded.column(ACTION), "close")).select(list(key_columns))
    else:
        keys = folded.select(list(key_columns))
    if folded.num_rows and pc.any(pc.invert(pc.is_null(folded.column(FROM_KEY)))).as_py():
        keys = pa.concat_tables([keys, old_keys(folded, schema, key_columns)])
    lookup = keys.group_by(list(key_columns)).aggregate([])
    ordered, first = sorted_lookup(lookup, key_columns[0])
    if truncate:
        result.removes += [str(entry["path"]) for entry in live]
        candidates = []
    else:
        candidates = candidate_files(live, key_columns[0], first) if lookup.num_rows else []
    upserts = folded.filter(pc.equal(folded.column(ACTION), "version" if history else "upsert"))
    # Upserts that left columns out (unchanged TOAST values) take them from the stored rows;
    # SCD type 2 writes the closed current versions again.
    with_rows = history or (
        upserts.num_rows > 0
        and bool(pc.any(pc.invert(pc.is_null(upserts.column(MISSING)))).as_py())
    )
    tasks = None
    if found is not None and delta is not None and candidates:
        tasks = _tasks_marks(table, delta.version(), found, lookup, key_columns)
        if tasks is not None:
            result.files_read_by_tasks = found.files_read
            # Files the tasks found none of the batch's keys in are not read, nor looked up.
            candidates = [
                e
                for e in candidates
                if str(e["path"]) in tasks.positions or str(e["path"]) in tasks.new
            ]
    wanted = [str(entry["path"]) for entry in candidates] + result.removes
    if delta is not None and wanted:
        result.files = log_files(table, delta.version(), wanted)
    current: dict[str, DeletedRows] = {}
    if tasks is not None:
        # Every DV of the files the tasks' marks go to, each DV file opened once.
        dvs = [
            result.files[path].deletion_vector
            for path in (str(e["path"]) for e in candidates)
            if path not in tasks.new
        ]
        current = read_deletion_vectors(table, [dv for dv in dvs if dv is not None])
    old_parts: list[pa.Table] = []
    rewrite: list[tuple[LogFile, DeletedRows]] = []
    for entry in candidates:
        file = result.files[str(entry["path"])]
        if tasks is not None and file.path not in tasks.new:
            found_at = tasks.positions[file.path]
            dv = file.deletion_vector
            marks = mark_positions(
                table,
                file.path,
                dv,
                found_at,
                with_rows,
                DeletedRows() if dv is None else current[dv.unique_id],
            )
        else:
            in_range = keys_in_range(entry, key_columns[0], ordered, first)
            marks = mark_file(
                table, file.path, file.deletion_vector, in_range, key_columns, with_rows, history
            )
            result.files_read += 1
        if marks is None:
            continue
        result.rows_marked += marks.marked
        if marks.old_rows is not None:
            old_parts.append(align_rows(marks.old_rows, schema))
        if file.num_records is None:
            rewrite.append((file, marks.deleted))
        else:
            result.deletions[file.path] = marks.deleted
    old_rows = pa.concat_tables(old_parts) if old_parts else schema.empty_table()
    content = fill_missing(upserts, old_rows, key_columns, schema)
    if history:
        closed, _ = close_current(old_rows, close_at, key_columns)
        content = pa.concat_tables([closed, content])
    sequence = 0
    if content.num_rows:
        result.adds.append(
            write_staged_file(table, staged_name(query_id, batch_id, sequence), content)
        )
        sequence += 1
    for file, deleted in rewrite:
        kept = _without(table, file, deleted, schema)
        result.removes.append(file.path)
        result.files_rewritten += 1
        if kept.num_rows:
            result.adds.append(
                write_staged_file(table, staged_name(query_id, batch_id, sequence), kept)
            )
            sequence += 1


@dataclass(frozen=True)
class _TasksMarks:
    """:class:`FoundMarks` made ready for one publish.

    The batch's positions per file the tasks found keys in, and the files added to the table
    after the tasks' version (read by the publisher).
    """

    positions: dict[str, np.ndarray]
    new: frozenset[str]


def _tasks_marks(
    table: Location,
    version: int,
    found: FoundMarks,
    lookup: pa.Table,
    key_columns: Sequence[str],
) -> _TasksMarks | None:
    """The tasks' marks of ``lookup``'s keys, per file, at the table's ``version``.

    Runs on the driver, once per batch and table whose tasks found marks. None when they cannot
    be used: found at a version after ``version`` (a table made anew since), with other key
    columns or types than the batch's keys, or when the log between the two versions is gone.
    """
    if found.version > version:
        return None
    names = list(key_columns)
    try:
        rows = found.rows.join(lookup, names, join_type="left semi")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError):
        return None
    new = paths_added(table, found.version, version)
    if new is None:
        return None
    by_path: dict[str, list[int]] = {}
    for path, position in zip(
        rows.column(MARK_PATH).to_pylist(), rows.column(MARK_POSITION).to_pylist(), strict=True
    ):
        by_path.setdefault(path, []).append(position)
    positions = {path: np.array(found_at, dtype=np.int64) for path, found_at in by_path.items()}
    return _TasksMarks(positions, frozenset(new))


def _without(table: Location, file: LogFile, deleted: DeletedRows, schema: pa.Schema) -> pa.Table:
    """The rows of ``file`` outside ``deleted``, in ``schema`` (its rewrite's new file)."""
    rows = staged_location(table, file.path).read_parquet()
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[deleted.indexes().astype(np.int64)] = False
    return align_rows(rows.filter(pa.array(keep)), schema)
