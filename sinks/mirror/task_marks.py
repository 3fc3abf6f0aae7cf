"""Finding the rows a batch replaces where the batch is written: in the executors' write tasks.

A merge-on-read apply (:mod:`.merge_on_read`) marks, in each file's deletion vector, the stored
rows the batch replaces or deletes. Finding them means reading the key columns of every file
whose statistics can hold a changed key: at 20M rows in files of 10,000, a batch of 2,000
uniformly random keys has candidates in about 1,200 files, and the publisher, one process on the
driver, read them one after another. Here each write task finds the *marks* (file and row
position) of its own rows' keys against the mirror's snapshot when the task runs (S_w), on the
executor that runs it, and returns them with its staged files (:class:`TableMarks`). The
publisher takes those marks for the files that were in S_w and reads only the files added after
it (batches published since, a compaction's output).

Why marks found at S_w stay right at the publish's snapshot S_p: a data file never changes under
its path (Delta writes new files; a deletion vector is a file of its own, named by the log), so
a row's position found at S_w is its position at S_p; a task marks every row holding one of its
keys, deleted or not, and the publisher keeps those its current DV does not delete yet; files
removed since S_w are not candidates at S_p, and a file that was in S_w is a candidate for the
same keys at S_p (its statistics do not change). A table's marks are used only when every task
that wrote rows of it marked them (:func:`combine`).

The key columns of the files a task reads are kept in the Python worker (Spark reuses workers
across tasks and batches) up to :data:`KEY_CACHE_BYTES`: with uniform keys the same files are
candidates batch after batch.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_ckpt.errors import MirrorChangeError, StorageError
from spark_ckpt.model.change_rows import DATA_OPS
from spark_ckpt.state.mirrors import table_directory
from spark_ckpt.state.storage import Location

from ..snapshots import check_out, give_back
from ..staging import staged_location
from .dv_commit import has_deletion_vectors
from .fold import END_AT
from .merge_on_read import MARK_PATH, MARK_POSITION
from .publish import table_schema
from .rewrite import candidate_files, key_hits, key_range, keys_in_range, sorted_lookup
from .types import to_arrow

__all__ = [
    "KEY_CACHE_BYTES",
    "TableMarks",
    "combine",
    "find_marks",
    "key_sources",
]

KEY_CACHE_BYTES = 512 << 20
"""Key columns a Python worker keeps (the least recently used go first): 20M rows of a
``bigint`` key are 160 MB."""

_SOURCE_COLUMNS = ("table", "op", "key", "before")


@dataclass(frozen=True)
class TableMarks:
    """What one task found of one table's rows (picklable; a commit message carries it).

    Attributes
    ----------
    table
        The source table (``schema.table``).
    directory
        Its mirror's directory, relative to the root.
    version
        The mirror's version the marks were found at (S_w); None when the task did not mark.
    key_columns
        The key columns the task's changes named.
    rows
        Per marked row: its key, its file's path as in the log (:data:`.MARK_PATH`) and its
        position in the file (:data:`.MARK_POSITION`). None when the task did not mark
        (``reason`` says why).
    files_read
        Candidate files whose key columns the task looked at.
    reason
        Why the task did not mark ("" when it did).
    """

    table: str
    directory: str
    version: int | None
    key_columns: tuple[str, ...]
    rows: pa.Table | None
    files_read: int = 0
    reason: str = ""


def key_sources(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The columns of a batch of change rows that name its keys (executor, per batch)."""
    return batch.select(list(_SOURCE_COLUMNS))


def _changed_keys(
    sources: pa.Table,
) -> dict[str, tuple[tuple[str, ...], list[tuple[object, ...]]] | None]:
    """Per table, its key columns and every key the task's changes name; None: not markable.

    The key of each change, and for an update the key its ``before`` image holds (a primary-
    key update replaces the old key's row). A table whose changes name different key columns is
    not markable (the fold refuses it, or a schema change rekeys it).
    """
    found: dict[str, tuple[tuple[str, ...], list[tuple[object, ...]]] | None] = {}
    columns = [sources.column(c).to_pylist() for c in _SOURCE_COLUMNS]
    for table, op, key_text, before_text in zip(*columns, strict=True):
        if op not in DATA_OPS:
            continue
        if table in found and found[table] is None:
            continue
        try:
            key = json.loads(key_text) if key_text else None
            before = json.loads(before_text) if op == "u" and before_text else None
        except ValueError:
            found[table] = None
            continue
        if not isinstance(key, dict) or not key:
            found[table] = None
            continue
        names = tuple(key)
        known = found.setdefault(table, (names, []))
        if known is None or known[0] != names:
            found[table] = None
            continue
        known[1].append(tuple(key.values()))
        if isinstance(before, dict) and all(c in before for c in names):
            old = tuple(before[c] for c in names)
            if old != known[1][-1]:
                known[1].append(old)
    return found


@dataclass(frozen=True)
class _FileKeys:
    """A data file's key columns as a task looks them up (kept per Python worker).

    For a single integer key column, also its values sorted and their positions in that order,
    so that a file is searched for the batch's keys in its range without Arrow calls (a batch
    on a large table looks in a thousand files or more).
    """

    table: pa.Table
    sorted_keys: np.ndarray | None
    order: np.ndarray | None

    @classmethod
    def of(cls, table: pa.Table, key_columns: Sequence[str]) -> _FileKeys:
        if len(key_columns) == 1 and pa.types.is_integer(table.schema.field(key_columns[0]).type):
            column = table.column(key_columns[0])
            if column.null_count == 0:
                values = column.to_numpy()
                order = np.argsort(values, kind="stable")
                return cls(table, values[order], order)
        return cls(table, None, None)

    @property
    def nbytes(self) -> int:
        extra = 0 if self.order is None or self.sorted_keys is None else self.order.nbytes * 2
        return int(self.table.nbytes) + extra

    def positions(self, wanted: np.ndarray) -> np.ndarray:
        """Positions of the rows whose (single integer) key is in ``wanted``."""
        assert self.sorted_keys is not None
        assert self.order is not None
        low = np.searchsorted(self.sorted_keys, wanted, side="left")
        high = np.searchsorted(self.sorted_keys, wanted, side="right")
        spans = [self.order[a:b] for a, b in zip(low.tolist(), high.tolist(), strict=True) if b > a]
        return np.concatenate(spans) if spans else np.empty(0, dtype=np.int64)


class _KeyCache:
    """Key columns of data files, by file URL and columns, least recently used out first."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.entries: OrderedDict[tuple[str, tuple[str, ...]], _FileKeys] = OrderedDict()
        self.lock = threading.Lock()

    def read(
        self, file: Location, columns: tuple[str, ...], key_columns: Sequence[str]
    ) -> _FileKeys:
        key = (file.url, columns)
        with self.lock:
            found = self.entries.get(key)
            if found is not None:
                self.entries.move_to_end(key)
                return found
        read = _FileKeys.of(file.read_parquet(list(columns)), key_columns)
        with self.lock:
            if key not in self.entries and read.nbytes <= self.budget:
                self.entries[key] = read
                self.used += read.nbytes
                while self.used > self.budget:
                    _, gone = self.entries.popitem(last=False)
                    self.used -= gone.nbytes
        return read


_CACHE = _KeyCache(KEY_CACHE_BYTES)


def find_marks(
    root: Location,
    sources: pa.Table,
    history: bool,
    min_files: int,
) -> tuple[TableMarks, ...]:
    """The marks of the rows the task's changes replace, per table (executor, once per task).

    ``sources``: the task's change rows' :func:`key_sources` columns; ``history`` (SCD type 2):
    only a key's current version is marked; ``min_files``: a mirror with fewer files is left to
    the publisher (a task's look at the table costs more than the publisher's reads then).
    Never raises for a table it cannot mark: it says why in :attr:`TableMarks.reason`.
    """
    marks = []
    for table, keys in sorted(_changed_keys(sources).items()):
        directory = table_directory(table)
        if keys is None:
            marks.append(TableMarks(table, directory, None, (), None, reason="keys"))
            continue
        try:
            marks.append(_table_marks(root, table, directory, keys, history, min_files))
        except StorageError as e:
            # A file vacuumed or a store that failed: the publisher reads what it needs itself.
            reason = f"storage: {e}"
            marks.append(TableMarks(table, directory, None, keys[0], None, reason=reason))
    return tuple(marks)


def _table_marks(
    root: Location,
    table: str,
    directory: str,
    keys: tuple[tuple[str, ...], list[tuple[object, ...]]],
    history: bool,
    min_files: int,
) -> TableMarks:
    key_columns, values = keys
    location = root.child(*directory.split("/"))
    delta = check_out(location)
    try:
        if delta is None or not has_deletion_vectors(delta):
            return TableMarks(table, directory, None, key_columns, None, reason="no table")
        live = pa.table(delta.get_add_actions(flatten=True))
        if live.num_rows < min_files:
            return TableMarks(table, directory, None, key_columns, None, reason="small")
        version = delta.version()
        schema = table_schema(delta)
        try:
            lookup = pa.Table.from_arrays(
                [
                    to_arrow([v[i] for v in values], schema.field(c).type, table, c)
                    for i, c in enumerate(key_columns)
                ],
                names=list(key_columns),
            )
        except (MirrorChangeError, KeyError, ValueError, TypeError, ArithmeticError) as e:
            return TableMarks(table, directory, None, key_columns, None, reason=f"keys: {e}")
    finally:
        give_back(location, delta)
    lookup = lookup.group_by(list(key_columns)).aggregate([])
    ordered, first = sorted_lookup(lookup, key_columns[0])
    candidates = candidate_files(live.to_pylist(), key_columns[0], first)
    read = (*key_columns, END_AT) if history else tuple(key_columns)
    wanted_all = _integer_keys(ordered, key_columns)
    parts = []
    for entry in candidates:
        path = str(entry["path"])
        stored = _CACHE.read(staged_location(location, path), read, key_columns)
        if wanted_all is not None and stored.sorted_keys is not None:
            start, end = key_range(entry, key_columns[0], first)
            positions = stored.positions(wanted_all[start:end])
        else:
            in_range = keys_in_range(entry, key_columns[0], ordered, first)
            mask = key_hits(stored.table.select(list(key_columns)), in_range, key_columns)
            positions = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        if history and positions.size:
            current = stored.table.column(END_AT).is_null().to_numpy(zero_copy_only=False)
            positions = positions[current[positions]]
        if positions.size:
            parts.append((path, np.sort(positions), stored.table))
    rows = _marks_table(parts, key_columns, lookup.schema)
    return TableMarks(table, directory, version, key_columns, rows, len(candidates))


def _integer_keys(ordered: pa.Table, key_columns: Sequence[str]) -> np.ndarray | None:
    """The lookup's keys as a sorted array, for a single integer key column without nulls."""
    if len(key_columns) != 1:
        return None
    column = ordered.column(key_columns[0])
    if not pa.types.is_integer(column.type) or column.null_count:
        return None
    return np.asarray(column.to_numpy())


def _marks_table(
    parts: Sequence[tuple[str, np.ndarray, pa.Table]],
    key_columns: Sequence[str],
    keys: pa.Schema,
) -> pa.Table:
    """One table of the marks found: each row's key, file and position."""
    fields = [*keys, pa.field(MARK_PATH, pa.string()), pa.field(MARK_POSITION, pa.int64())]
    if not parts:
        return pa.schema(fields).empty_table()
    columns = [
        pa.concat_arrays(
            [
                stored.column(c).take(pa.array(positions)).combine_chunks()
                for _, positions, stored in parts
            ]
        )
        for c in key_columns
    ]
    paths = [path for path, positions, _ in parts for _ in range(positions.size)]
    found = np.concatenate([positions for _, positions, _ in parts])
    return pa.Table.from_arrays(
        [*columns, pa.array(paths, pa.string()), pa.array(found, pa.int64())],
        schema=pa.schema(fields),
    )


def combine(found: Iterable[TableMarks]) -> dict[str, TableMarks]:
    """Every task's marks of a table as one, per table; a table some task did not mark is left out.

    Runs on the driver in the batch's pre-commit. The version is the oldest any task saw (the
    publisher reads every file added after it).
    """
    by_table: dict[str, list[TableMarks]] = {}
    for marks in found:
        by_table.setdefault(marks.table, []).append(marks)
    combined = {}
    for table, parts in by_table.items():
        versions = [p.version for p in parts]
        rows = [p.rows for p in parts]
        if any(v is None for v in versions) or any(r is None for r in rows):
            continue
        if len({p.key_columns for p in parts}) != 1 or len({p.directory for p in parts}) != 1:
            continue
        tables = [r for r in rows if r is not None]
        try:
            merged = pa.concat_tables(tables, promote_options="none")
        except pa.ArrowInvalid:
            continue  # key types that differ between tasks: a schema change between them
        combined[table] = TableMarks(
            table,
            parts[0].directory,
            min(v for v in versions if v is not None),
            parts[0].key_columns,
            merged,
            sum(p.files_read for p in parts),
        )
    return combined
