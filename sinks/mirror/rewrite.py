"""Applying one batch's folded changes to one mirror table copy-on-write: which files to rewrite.

The apply of tables without deletion vectors and of a schema change's rewrite of every file
(:mod:`.merge_on_read` applies the others, SCD type 2 included, with the helpers here).

Only files that hold a changed key are read in full and rewritten (the rest of the table is never
read): a file is a *candidate* when the first key column's min/max statistics can hold a changed
key, and a candidate is rewritten only when its key columns, read alone, do hold one. A rewritten
file keeps its unchanged rows and takes the new versions of its own keys, so files stay clustered
by key as the table grows; keys that are new to the table go to one new file. The result is a
list of files to add and remove, committed by :mod:`.publish` as one Delta commit. Runs on the
driver, in whichever process publishes batch N.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping, Sequence
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
from .deletion_vectors import DeletionVectorDescriptor, live_rows
from .evolution import ProjectedColumn
from .fold import ACTION, END_AT, FROM_KEY, META_COLUMNS, MISSING, START_AT
from .types import to_arrow

__all__ = [
    "TableRewrite",
    "align_rows",
    "candidate_files",
    "close_current",
    "close_times",
    "fill_missing",
    "key_hits",
    "key_range",
    "keys_in_range",
    "old_keys",
    "rewrite_table",
    "sorted_lookup",
]

_ROW = "_spark_ckpt_row"


@dataclass
class TableRewrite:
    """The files one batch adds to and removes from a mirror table.

    Attributes
    ----------
    adds
        New files (rewritten files' replacements and the file of new keys).
    removes
        Delta log paths of the files replaced.
    files_read
        Files whose key columns were read (candidates by statistics).
    """

    adds: list[StagedFile] = field(default_factory=list)
    removes: list[str] = field(default_factory=list)
    files_read: int = 0

    def discard(self, table: Location) -> None:
        """Delete the written files (a commit that lost a race, or failed)."""
        discard_staged(table, self.adds)


def align_rows(
    rows: pa.Table, schema: pa.Schema, projection: Sequence[ProjectedColumn] | None = None
) -> pa.Table:
    """Stored ``rows`` in ``schema``, each column from where ``projection`` says.

    Without a projection, columns are taken by name and those ``rows`` lack are null. With one,
    a column takes its ``source`` column's values (renamed, widened by a cast) or, with no
    source, its ``default`` in every row. Runs on the driver, once per file read whole.
    """
    sources = {c.name: c for c in projection or ()}
    arrays = []
    for f in schema:
        projected = sources.get(f.name)
        name = f.name if projected is None else projected.source
        if name is not None and name in rows.column_names:
            column = rows.column(name)
            arrays.append(column if column.type == f.type else column.cast(f.type))
        elif projected is not None and projected.default is not None:
            arrays.append(to_arrow([projected.default] * rows.num_rows, f.type, "", f.name))
        else:
            arrays.append(pa.nulls(rows.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def candidate_files(
    live: list[dict[str, Any]], first_key: str, keys: Sequence[Any]
) -> list[dict[str, Any]]:
    """Files whose first-key-column range can hold one of ``keys`` (sorted).

    Runs on the driver, once per batch and table (copy-on-write and merge-on-read alike).
    """
    found = []
    for entry in live:
        low, high = entry.get(f"min.{first_key}"), entry.get(f"max.{first_key}")
        if low is None or high is None:
            found.append(entry)  # no statistics: it may hold anything
            continue
        try:
            start = bisect.bisect_left(keys, low)
            if start < len(keys) and keys[start] <= high:
                found.append(entry)
        except TypeError:
            found.append(entry)
    return found


def sorted_lookup(lookup: pa.Table, key_column: str) -> tuple[pa.Table, list[Any]]:
    """``lookup``'s rows in the order of ``key_column``'s values, and those values (nulls left out).

    Sorted by Python's comparison, the one :func:`candidate_files` and :func:`keys_in_range`
    bisect with, so that a file's keys are a slice of the rows. Runs on the driver, once per
    batch and table.
    """
    values = lookup.column(key_column).to_pylist()
    order = sorted((i for i, v in enumerate(values) if v is not None), key=values.__getitem__)
    return lookup.take(pa.array(order, pa.int64())), [values[i] for i in order]


def keys_in_range(
    entry: dict[str, Any], first_key: str, ordered: pa.Table, first: Sequence[Any]
) -> pa.Table:
    """The rows of ``ordered`` (:func:`sorted_lookup`) that the file ``entry``'s range can hold.

    A candidate file's key column is matched against these only: a batch of uniformly random
    keys has one or two in a file's range, where hashing all of them for every candidate cost
    about as much as reading the file's keys. All of them when the file has no statistics for the
    column or they do not compare with the keys. Runs on the driver, once per candidate file.
    """
    start, end = key_range(entry, first_key, first)
    return ordered.slice(start, end - start)


def key_range(entry: dict[str, Any], first_key: str, first: Sequence[Any]) -> tuple[int, int]:
    """Where the keys the file ``entry``'s range can hold are in ``first`` (sorted): a slice.

    All of them when the file has no statistics for the column or they do not compare with the
    keys. Runs wherever candidates are matched, once per candidate file.
    """
    low, high = entry.get(f"min.{first_key}"), entry.get(f"max.{first_key}")
    if low is None or high is None:
        return 0, len(first)
    try:
        return bisect.bisect_left(first, low), bisect.bisect_right(first, high)
    except TypeError:
        return 0, len(first)


def _key_tuples(rows: pa.Table, key_columns: Sequence[str]) -> list[tuple[Any, ...]]:
    columns = [rows.column(c).to_pylist() for c in key_columns]
    return list(zip(*columns, strict=True))


def old_keys(folded: pa.Table, schema: pa.Schema, key_columns: Sequence[str]) -> pa.Table:
    """The old keys of primary-key updates (whose stored rows fill missing columns), typed.

    Runs on the driver, once per batch and table with primary-key updates.
    """
    texts = [t for t in folded.column(FROM_KEY).to_pylist() if t is not None]
    parsed = [json.loads(t) for t in texts]
    return pa.Table.from_arrays(
        [
            to_arrow([p[i] for p in parsed], schema.field(c).type, "", c)
            for i, c in enumerate(key_columns)
        ],
        names=list(key_columns),
    )


def key_hits(rows: pa.Table, lookup: pa.Table, key_columns: Sequence[str]) -> pa.Array:
    """A mask of the rows of ``rows`` whose key is in ``lookup`` (key columns only).

    Runs wherever a candidate file is read (the driver today), once per candidate.
    """
    import pyarrow.compute as pc  # lazily: 0.1 s per process, unused by append commits

    if len(key_columns) == 1:
        column, wanted = rows.column(key_columns[0]), lookup.column(key_columns[0])
        if column.type == wanted.type:
            # A hash lookup: a tenth of a join's cost on a file of 10k rows, and a batch's
            # apply makes one per candidate file. Null keys match nothing, as in the join.
            return pc.is_in(column, value_set=wanted.combine_chunks(), skip_nulls=True)
    positions = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    keyed = rows.select(list(key_columns)).append_column(_ROW, positions)
    matched = keyed.join(lookup, list(key_columns), join_type="left semi").column(_ROW)
    return pc.is_in(positions, value_set=matched.combine_chunks())


def fill_missing(
    upserts: pa.Table,
    old_rows: pa.Table,
    key_columns: Sequence[str],
    schema: pa.Schema,
) -> pa.Table:
    """Upserts whose changes left columns out (unchanged TOAST values) take the stored values.

    Runs on the driver, once per batch and table; ``old_rows`` are the stored versions of the
    batch's changed keys.
    """
    import pyarrow.compute as pc  # lazily: 0.1 s per process, unused by append commits

    partial = pc.invert(pc.is_null(upserts.column(MISSING)))
    if not pc.any(partial).as_py():
        return upserts.drop_columns(list(META_COLUMNS))
    stored = {
        key: row
        for key, row in zip(_key_tuples(old_rows, key_columns), old_rows.to_pylist(), strict=True)
    }
    filled = []
    for row in upserts.filter(partial).to_pylist():
        source = row
        if row[FROM_KEY]:  # a primary-key update: the old key's stored row has the values
            typed = old_keys(pa.table({FROM_KEY: [row[FROM_KEY]]}), schema, key_columns)
            source = typed.to_pylist()[0]
        old = stored.get(tuple(source[c] for c in key_columns))
        for column in row[MISSING]:
            row[column] = None if old is None else old.get(column)
        filled.append({f.name: row[f.name] for f in schema})
    whole = upserts.filter(pc.invert(partial)).drop_columns(list(META_COLUMNS))
    return pa.concat_tables([whole, pa.Table.from_pylist(filled, schema=schema)])


def close_times(folded: pa.Table, key_columns: Sequence[str]) -> dict[tuple[Any, ...], Any]:
    """SCD type 2: when each changed key's stored current version ends."""
    import pyarrow.compute as pc  # lazily: 0.1 s per process, unused by append commits

    closes = folded.filter(pc.equal(folded.column(ACTION), "close"))
    return dict(
        zip(_key_tuples(closes, key_columns), closes.column(START_AT).to_pylist(), strict=True)
    )


def close_current(
    matched: pa.Table, close_at: dict[tuple[Any, ...], Any], key_columns: Sequence[str]
) -> tuple[pa.Table, pa.Table]:
    """SCD type 2: ``matched`` with current versions closed, and those versions as they were."""
    rows = matched.to_pylist()
    current = []
    for row in rows:
        key = tuple(row[c] for c in key_columns)
        if row[END_AT] is None and key in close_at:
            current.append(dict(row))
            row[END_AT] = close_at[key]
    return (
        pa.Table.from_pylist(rows, schema=matched.schema),
        pa.Table.from_pylist(current, schema=matched.schema),
    )


def rewrite_table(
    table: Location,
    delta: DeltaTable | None,
    folded: pa.Table,
    key_columns: Sequence[str],
    truncate: bool,
    schema: pa.Schema,
    query_id: str,
    batch_id: int,
    history: bool = False,
    projection: Sequence[ProjectedColumn] | None = None,
    dvs: Mapping[str, DeletionVectorDescriptor | None] | None = None,
) -> TableRewrite:
    """Stage the files that apply ``folded`` to the mirror at ``table`` (snapshot ``delta``).

    ``schema`` is the mirror's Arrow schema after the batch. With ``history`` (SCD type 2)
    ``folded`` holds row versions (:meth:`.fold.FoldedTable.history_arrow`): stored rows are
    never removed, a changed key's current version is closed, and the batch's versions are
    added. With a ``projection`` (a schema change the stored rows must follow) every file is
    read and rewritten, its rows projected (:func:`align_rows`); ``adds`` then hold the whole
    table. ``dvs``: the deletion vector of each live file, for a table with the
    ``deletionVectors`` feature (a file with one is read whole, its deleted rows left out).
    Nothing is committed; on error the files written so far are deleted.

    Raises
    ------
    StorageError
        When a file of the mirror's snapshot cannot be read (``StorageNotFoundError``: it is
        gone, e.g. vacuumed while this snapshot was in use).
    """
    result = TableRewrite()
    try:
        _rewrite(
            result,
            table,
            delta,
            folded,
            key_columns,
            truncate,
            schema,
            (query_id, batch_id),
            history,
            projection,
            dvs or {},
        )
    except BaseException:
        result.discard(table)
        raise
    return result


def _rewrite(
    result: TableRewrite,
    table: Location,
    delta: DeltaTable | None,
    folded: pa.Table,
    key_columns: Sequence[str],
    truncate: bool,
    schema: pa.Schema,
    names: tuple[str, int],
    history: bool,
    projection: Sequence[ProjectedColumn] | None,
    dvs: Mapping[str, DeletionVectorDescriptor | None],
) -> None:
    import pyarrow.compute as pc  # lazily: 0.1 s per process, unused by append commits

    query_id, batch_id = names
    live: list[dict[str, Any]] = []
    if delta is not None:
        live = pa.table(delta.get_add_actions(flatten=True)).to_pylist()
    if truncate:
        result.removes += [str(entry["path"]) for entry in live]
        live = []
    keys = folded.select(list(key_columns))
    if folded.num_rows and pc.any(pc.invert(pc.is_null(folded.column(FROM_KEY)))).as_py():
        keys = pa.concat_tables([keys, old_keys(folded, schema, key_columns)])
    lookup = keys.group_by(list(key_columns)).aggregate([])
    first = sorted(v for v in lookup.column(key_columns[0]).to_pylist() if v is not None)
    old_parts: list[pa.Table] = []
    rewritten: list[tuple[str, pa.Table, pa.Table]] = []  # path, kept rows, its changed keys
    close_at = close_times(folded, key_columns) if history else {}
    if projection is not None:
        candidates = live  # every stored row follows the schema change
    else:
        candidates = candidate_files(live, key_columns[0], first) if lookup.num_rows else []
    for entry in candidates:
        path = str(entry["path"])
        location = staged_location(table, path)
        dv = dvs.get(path)
        if dv is not None:  # only its live rows: its key columns alone would not say which
            rows = align_rows(live_rows(table, path, dv), schema, projection)
            mask = key_hits(rows.select(list(key_columns)), lookup, key_columns)
            result.files_read += 1
            if projection is None and not pc.any(mask).as_py():
                continue
        elif projection is not None:
            rows = align_rows(location.read_parquet(), schema, projection)
            mask = key_hits(rows.select(list(key_columns)), lookup, key_columns)
            result.files_read += 1
        else:
            file_keys = location.read_parquet(key_columns)
            result.files_read += 1
            mask = key_hits(file_keys, lookup, key_columns)
            if not pc.any(mask).as_py():
                continue  # the statistics allowed a changed key, but the file holds none
            rows = align_rows(location.read_parquet(), schema)
        matched = rows.filter(mask)
        kept = rows.filter(pc.invert(mask))
        if history:
            closed, current = close_current(matched, close_at, key_columns)
            old_parts.append(current)
            kept = pa.concat_tables([kept, closed])
        else:
            old_parts.append(matched)
        rewritten.append((path, kept, matched.select(list(key_columns))))
    old_rows = pa.concat_tables(old_parts) if old_parts else schema.empty_table()
    action = "version" if history else "upsert"
    upserts = folded.filter(pc.equal(folded.column(ACTION), action))
    upserts = fill_missing(upserts, old_rows, key_columns, schema)
    # Each upsert goes back to the file its key was in (files stay clustered by key).
    home: dict[tuple[Any, ...], int] = {}
    for index, (_, _, changed) in enumerate(rewritten):
        for key in _key_tuples(changed, key_columns):
            home[key] = index
    groups: dict[int, list[int]] = {}
    for row, key in enumerate(_key_tuples(upserts, key_columns)):
        groups.setdefault(home.get(key, -1), []).append(row)
    sequence = 0
    for index, (path, kept, _) in enumerate(rewritten):
        result.removes.append(path)
        parts = [kept]
        if index in groups:
            parts.append(upserts.take(pa.array(groups[index], pa.int64())))
        content = pa.concat_tables(parts)
        if content.num_rows:
            result.adds.append(
                write_staged_file(table, staged_name(query_id, batch_id, sequence), content)
            )
            sequence += 1
    if -1 in groups:
        content = upserts.take(pa.array(groups[-1], pa.int64()))
        result.adds.append(
            write_staged_file(table, staged_name(query_id, batch_id, sequence), content)
        )
