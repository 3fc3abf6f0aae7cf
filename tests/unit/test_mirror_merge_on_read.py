"""Mirror mode's merge-on-read apply without a JVM: deletion vectors instead of rewritten files.

Batches are planned and published as the sink does (:class:`test_mirror_apply.Mirror`), against
real Delta tables on local disk; each commit's ``commitInfo`` says what the apply read and
changed, and the log says which file has which deletion vector.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_mirror_apply import Mirror, by_id

from spark_ckpt.sinks.mirror.dv_commit import has_deletion_vectors, log_files
from spark_ckpt.sinks.mirror.rewrite import keys_in_range, sorted_lookup
from spark_ckpt.sinks.mirror.task_marks import combine, find_marks

TABLE = "s.t"


def paths(mirror: Mirror) -> set[str]:
    return set(pa.table(mirror.table(TABLE).get_add_actions(flatten=True))["path"].to_pylist())


def last_apply(mirror: Mirror) -> dict[str, int]:
    """The newest commit's counts: files read, files marked, rows marked, files rewritten."""
    (info,) = mirror.table(TABLE).history(1)
    names = ("filesRead", "filesMarked", "rowsMarked", "filesRewritten")
    return {name: int(info[f"spark-ckpt.mirror.{name}"]) for name in names}


def dvs(mirror: Mirror) -> dict[str, int]:
    """Each live file's deleted row count (files without a DV left out)."""
    delta = mirror.table(TABLE)
    files = log_files(mirror.root.child(TABLE), delta.version(), paths(mirror))
    return {
        path: file.deletion_vector.cardinality
        for path, file in files.items()
        if file.deletion_vector is not None
    }


def load(mirror: Mirror, first: int, count: int) -> None:
    mirror.apply(
        [(TABLE, "c", {"id": i}, None, {"id": i, "v": "a"}) for i in range(first, first + count)]
    )


def test_a_batch_marks_rows_of_the_files_holding_its_keys_and_rewrites_none(
    tmp_path: Path,
) -> None:
    """An update and a delete become DVs on their two files; new versions go to one new file."""
    mirror = Mirror(tmp_path / "root")
    for first in (0, 100, 200):  # three files with disjoint key ranges
        load(mirror, first, 50)
    before = paths(mirror)
    mirror.apply(
        [
            (TABLE, "u", {"id": 120}, None, {"id": 120, "v": "b"}),
            (TABLE, "d", {"id": 30}, {"id": 30}, None),
            (TABLE, "c", {"id": 999}, None, {"id": 999, "v": "new"}),
        ]
    )
    after = paths(mirror)
    assert before < after, "no file is removed"
    assert len(after - before) == 1, "one file of new versions (120's and 999)"
    assert sorted(dvs(mirror).values()) == [1, 1], "one row marked in each of two files"
    assert last_apply(mirror) == {
        "filesRead": 2,  # by statistics, the files of 0..49 and 100..149; 999 is in none
        "filesMarked": 2,
        "rowsMarked": 2,
        "filesRewritten": 0,
    }
    rows = by_id(mirror.rows(TABLE))
    assert len(rows) == 150
    assert 30 not in rows
    assert rows[120]["v"] == "b"
    assert rows[999]["v"] == "new"


def test_rows_a_deletion_vector_deletes_are_not_live_for_the_next_batch(tmp_path: Path) -> None:
    """A key changed twice: the second batch marks and fills from its live version only."""
    mirror = Mirror(tmp_path / "root")
    mirror.apply(
        [(TABLE, "c", {"id": i}, None, {"id": i, "a": 0, "big": f"x{i}"}) for i in range(20)]
    )
    mirror.apply([(TABLE, "u", {"id": 5}, None, {"id": 5, "a": 1, "big": "y"})])
    assert last_apply(mirror)["rowsMarked"] == 1
    mirror.apply([(TABLE, "u", {"id": 5}, None, {"id": 5, "a": 2})])  # big left out (TOAST)
    assert last_apply(mirror)["filesRead"] == 2, "the first file's statistics still hold 5"
    assert last_apply(mirror)["rowsMarked"] == 1, "only the live version is marked"
    rows = by_id(mirror.rows(TABLE))
    assert rows[5] == {"id": 5, "a": 2, "big": "y"}
    assert len(rows) == 20


def test_new_tables_get_deletion_vectors_and_existing_tables_do_not(
    tmp_path: Path,
) -> None:
    """The default is merge-on-read for new tables only: a user's protocol is never upgraded."""
    fresh = Mirror(tmp_path / "fresh")
    load(fresh, 0, 3)
    assert has_deletion_vectors(fresh.table(TABLE))
    history = Mirror(tmp_path / "history", history=True)
    load(history, 0, 3)
    assert has_deletion_vectors(history.table(TABLE)), "SCD type 2 too"
    old = Mirror(tmp_path / "old", deletion_vectors=False)
    load(old, 0, 3)
    old.deletion_vectors = True  # the query restarted with the default
    before = paths(old)
    old.apply([(TABLE, "u", {"id": 1}, None, {"id": 1, "v": "b"})])
    assert not has_deletion_vectors(old.table(TABLE))
    assert not before <= paths(old), "copy-on-write: the file holding 1 is replaced"
    assert by_id(old.rows(TABLE))[1]["v"] == "b"


def test_a_truncate_removes_files_with_their_deletion_vectors(tmp_path: Path) -> None:
    """Removing a file that has a DV names the DV (else the logical file would stay live)."""
    mirror = Mirror(tmp_path / "root")
    load(mirror, 0, 10)
    mirror.apply([(TABLE, "d", {"id": 1}, {"id": 1}, None)])
    truncate: Any = (TABLE, "t", None, None, None)
    mirror.apply([truncate, (TABLE, "c", {"id": 7}, None, {"id": 7, "v": "c"})])
    assert mirror.rows(TABLE) == [{"id": 7, "v": "c"}]
    assert len(paths(mirror)) == 1


@pytest.mark.parametrize("marks", ["publisher", "tasks"])
def test_scd2_by_deletion_vectors_keeps_the_same_history_as_copy_on_write(
    tmp_path: Path, marks: str
) -> None:
    """SCD type 2 by DVs: the rows copy-on-write gives, and no stored file rewritten.

    Random batches (several changes of a key in one batch, deletes, re-inserts) give the mirror
    applied by DVs exactly the rows of one applied copy-on-write; the DV apply marks current
    versions (found by the publisher, or by the write tasks) and adds one file.
    """
    by_dv = Mirror(tmp_path / "dv", history=True, marks=marks)
    by_cow = Mirror(tmp_path / "cow", history=True, deletion_vectors=False)
    rng = random.Random(5)
    present: set[int] = set()
    for batch in range(12):
        changes: list[Any] = []
        for key in [rng.randrange(30) for _ in range(8)]:
            if key in present and rng.random() < 0.25:
                changes.append((TABLE, "d", {"id": key}, {"id": key}, None))
                present.discard(key)
            else:
                op = "u" if key in present else "c"
                changes.append((TABLE, op, {"id": key}, None, {"id": key, "v": f"b{batch}"}))
                present.add(key)
        before = paths(by_dv) if batch else set()
        for mirror in (by_dv, by_cow):
            mirror.apply(changes)
        assert before <= paths(by_dv), f"batch {batch}: a stored file was rewritten"
        assert last_apply(by_dv)["filesRewritten"] == 0
        rows = sorted(repr(sorted(r.items())) for r in by_dv.rows(TABLE))
        assert rows == sorted(repr(sorted(r.items())) for r in by_cow.rows(TABLE)), batch
    assert not has_deletion_vectors(by_cow.table(TABLE))
    assert dvs(by_dv), "current versions were marked"
    current = [r for r in by_dv.rows(TABLE) if r["__end_at"] is None]
    assert sorted(r["id"] for r in current) == sorted(present)


def test_a_candidate_is_matched_against_the_keys_its_range_can_hold_only() -> None:
    """The lookup's rows in a file's first-key range, nulls never; all without usable bounds."""
    lookup = pa.table({"k": [25, None, 10, 5, 20, 15], "j": ["f", "n", "b", "a", "d", "c"]})
    ordered, first = sorted_lookup(lookup, "k")
    assert first == [5, 10, 15, 20, 25]
    assert ordered.column("j").to_pylist()[:5] == ["a", "b", "c", "d", "f"]
    in_range = keys_in_range({"min.k": 10, "max.k": 20}, "k", ordered, first)
    assert in_range.to_pylist() == [
        {"k": 10, "j": "b"},
        {"k": 15, "j": "c"},
        {"k": 20, "j": "d"},
    ]
    assert keys_in_range({"min.k": 21, "max.k": 24}, "k", ordered, first).num_rows == 0
    assert keys_in_range({"min.k": None, "max.k": 20}, "k", ordered, first).equals(ordered)
    assert keys_in_range({"min.k": "a", "max.k": "z"}, "k", ordered, first).equals(ordered)


@pytest.mark.parametrize("marks", ["publisher", "tasks"])
def test_a_composite_key_marks_only_rows_matching_every_key_column(
    tmp_path: Path, marks: str
) -> None:
    """Files sharing a range of the first key column: the second column decides which row goes."""
    mirror = Mirror(tmp_path / "root", marks=marks)
    for tenant in (1, 2):  # two files, both holding ids 0..19 (same first-column range)
        mirror.apply(
            [
                (TABLE, "c", {"id": i, "t": tenant}, None, {"id": i, "t": tenant, "v": "a"})
                for i in range(20)
            ]
        )
    mirror.apply(
        [
            (TABLE, "u", {"id": 7, "t": 2}, None, {"id": 7, "t": 2, "v": "b"}),
            (TABLE, "d", {"id": 19, "t": 1}, {"id": 19, "t": 1}, None),
        ]
    )
    assert last_apply(mirror) == {
        "filesRead": 2 if marks == "publisher" else 0,
        "filesMarked": 2,
        "rowsMarked": 2,
        "filesRewritten": 0,
    }
    rows = {(r["id"], r["t"]): r["v"] for r in mirror.rows(TABLE)}
    assert len(rows) == 39
    assert (19, 1) not in rows
    assert rows[(19, 2)] == "a"
    assert rows[(7, 2)] == "b"
    assert rows[(7, 1)] == "a"


def read_by_tasks(mirror: Mirror) -> int:
    (info,) = mirror.table(TABLE).history(1)
    return int(info["spark-ckpt.mirror.filesReadByTasks"])


def test_marks_the_write_tasks_found_spare_the_publisher_reading_any_file(
    tmp_path: Path,
) -> None:
    """The same batch as the first test, its stored rows found by the write tasks."""
    mirror = Mirror(tmp_path / "root", marks="tasks")
    for first in (0, 100, 200):
        load(mirror, first, 50)
    mirror.apply(
        [
            (TABLE, "u", {"id": 120}, None, {"id": 120, "v": "b"}),
            (TABLE, "d", {"id": 30}, {"id": 30}, None),
            (TABLE, "c", {"id": 999}, None, {"id": 999, "v": "new"}),
        ]
    )
    assert last_apply(mirror) == {
        "filesRead": 0,
        "filesMarked": 2,
        "rowsMarked": 2,
        "filesRewritten": 0,
    }
    assert read_by_tasks(mirror) == 2, "each task read the one file its key can be in"
    rows = by_id(mirror.rows(TABLE))
    assert len(rows) == 150
    assert 30 not in rows
    assert rows[120]["v"] == "b"


def test_tasks_that_looked_before_the_last_batch_was_published_are_completed_by_the_publisher(
    tmp_path: Path,
) -> None:
    """Batch B's tasks ran before batch A (which changed key 120) was published.

    They found 120 in the loaded file, where A's publish marked it since; A's new version of
    120 is in a file added after their look, which the publisher reads (and marks 120 there).
    """
    mirror = Mirror(tmp_path / "root", marks="tasks-behind")
    for first in (0, 100, 200):
        load(mirror, first, 50)
    mirror.apply([(TABLE, "u", {"id": 120}, None, {"id": 120, "v": "a"})])  # A, not published
    mirror.apply(
        [
            (TABLE, "u", {"id": 120}, None, {"id": 120, "v": "b"}),
            (TABLE, "d", {"id": 30}, {"id": 30}, None),
        ]
    )  # B: its tasks look, then A is published, then B is planned (and published below)
    rows = by_id(mirror.rows(TABLE))
    assert last_apply(mirror) == {
        "filesRead": 1,  # A's new file, added after B's tasks looked
        "filesMarked": 2,  # 30's file (the tasks' mark) and A's file (the publisher's)
        "rowsMarked": 2,  # 120's loaded version was marked by A already: not again
        "filesRewritten": 0,
    }
    assert read_by_tasks(mirror) == 2
    assert len(rows) == 149
    assert rows[120]["v"] == "b"
    assert 30 not in rows
    assert sorted(dvs(mirror).values()) == [1, 1], "30 and 120's loaded version"
    assert len(paths(mirror)) == 4, "the three loaded files and B's; A's held only 120"


def test_a_table_some_task_could_not_mark_is_left_to_the_publisher(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "root")
    load(mirror, 0, 50)
    rows = pa.table(
        {
            "table": [TABLE, TABLE],
            "op": ["u", "u"],
            "key": ['{"id": 3}', '{"id": 4}'],
            "before": [None, None],
        }
    )
    found = find_marks(mirror.root, rows, history=False, min_files=0)
    (marks,) = found
    assert marks.rows is not None
    assert marks.version is not None
    assert marks.rows.column("id").to_pylist() == [3, 4]
    assert combine(found)[TABLE].rows is not None
    (small,) = find_marks(mirror.root, rows, history=False, min_files=2)
    assert small.rows is None
    assert small.reason == "small", "one file: the publisher reads it"
    assert combine([*found, small]) == {}, "one task did not mark: nobody's marks are used"
    (other,) = find_marks(mirror.root, rows.slice(0, 1), history=False, min_files=0)
    assert TABLE in combine([marks, other])
    none = find_marks(mirror.root, rows.set_column(0, "table", pa.array(["s.new"] * 2)), False, 0)
    assert none[0].reason == "no table"
