"""A mirror's compaction without a JVM: its choice of files, its commit, its races with the apply.

Batches are planned and published as the sink does (:class:`test_mirror_apply.Mirror`) against
real Delta tables on local disk. The races are made to happen at a chosen moment: the apply's or
the compaction's commit is wrapped so that the other one commits first (the real functions run;
only their order is chosen), and a thread compacts in a loop while batches are applied.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from test_mirror_apply import Mirror, by_id
from test_mirror_merge_on_read import TABLE, dvs, last_apply, load, paths

from spark_ckpt.sinks.mirror import compaction, dv_commit
from spark_ckpt.sinks.mirror.compaction import CompactionResult, choose_bins, compact_table
from spark_ckpt.sinks.mirror.compaction_policy import CompactionPolicy
from spark_ckpt.sinks.mirror.deletion_vectors import DeletionVectorDescriptor
from spark_ckpt.sinks.mirror.dv_commit import LogFile
from spark_ckpt.sinks.mirror.plan import MirrorPlan
from spark_ckpt.state.storage import Location

KEYS = ("id",)


def log_file(path: str, size: int, records: int = 100, deleted: int = 0, low: int = 0) -> LogFile:
    """A file's ``add`` as the log would hold it (a DV of ``deleted`` rows when non-zero)."""
    dv = None
    if deleted:
        dv = DeletionVectorDescriptor("i", "inline", 10, deleted)  # only its count is read
    stats = json.dumps({"numRecords": records, "minValues": {"id": low}})
    return LogFile(path, size, 0, {}, stats, dv)


def compact(mirror: Mirror, policy: CompactionPolicy) -> CompactionResult:
    return compact_table(mirror.root.child(TABLE), policy, KEYS)


def model_rows(mirror: Mirror) -> dict[Any, dict[str, Any]]:
    return by_id(mirror.rows(TABLE))


# -- which files ----------------------------------------------------------------------------


def test_small_files_are_packed_by_key_once_there_are_enough_and_large_ones_left_alone() -> None:
    policy = CompactionPolicy(min_files=3, target_size=1000)
    big = log_file("big", 900)
    small = [log_file(f"s{i}", 250, low=low) for i, low in enumerate((50, 10, 30, 40, 20))]
    assert choose_bins([big, *small[:2]], policy) == [], "two small files: fewer than 3"
    bins = choose_bins([big, *small], policy, "id")
    # By first key: 10, 20, 30, 40 fill the 1000 bytes; 50 alone would change nothing.
    assert [[f.path for f in b] for b in bins] == [["s1", "s4", "s2", "s3"]]


def test_a_file_past_the_deleted_ratio_is_purged_even_alone() -> None:
    policy = CompactionPolicy(deleted_ratio=0.25, min_files=10, target_size=1000)
    heavy = log_file("heavy", 900, records=100, deleted=30)
    light = log_file("light", 900, records=100, deleted=10)
    assert [[f.path for f in b] for b in choose_bins([heavy, light], policy)] == [["heavy"]]
    tiny = log_file("tiny", 100, records=4, deleted=1)
    # tiny is small and past the ratio: purged though there are not 10 small files.
    bins = choose_bins([heavy, tiny], policy, "id")
    assert sorted(f.path for b in bins for f in b) == ["heavy", "tiny"]


def test_the_policy_is_due_every_n_batches_and_survives_the_manifest() -> None:
    policy = CompactionPolicy(every=3, deleted_ratio=0.3, min_files=4, target_size=4096)
    assert [b for b in range(9) if policy.due(b)] == [2, 5, 8]
    assert not any(CompactionPolicy(every=0).due(b) for b in range(9))
    plan = MirrorPlan("file:///m", (), compaction=policy)
    assert MirrorPlan.from_json(json.loads(json.dumps(plan.to_json()))).compaction == policy
    old = plan.to_json()
    del old["compaction"]
    assert MirrorPlan.from_json(old).compaction == CompactionPolicy(), "an older manifest"


# -- one compaction -------------------------------------------------------------------------


def test_compaction_packs_the_batches_files_and_purges_deleted_rows_in_a_commit_of_its_own(
    tmp_path: Path,
) -> None:
    """After it, the same rows are read from fewer files, none with a DV, and txn is unchanged."""
    mirror = Mirror(tmp_path / "root")
    random.seed(7)
    for batch in range(12):
        keys = random.sample(range(200), 15)
        mirror.apply([(TABLE, "u", {"id": k}, None, {"id": k, "v": f"b{batch}"}) for k in keys])
    mirror.apply([(TABLE, "d", {"id": k}, {"id": k}, None) for k in range(0, 200, 3)])
    before = model_rows(mirror)
    delta = mirror.table(TABLE)
    version, txn = delta.version(), delta.transaction_version(mirror.query_id)
    assert len(paths(mirror)) == 12, "a file per batch"
    assert dvs(mirror), "rows marked in them"
    result = compact(mirror, CompactionPolicy(deleted_ratio=0.2, min_files=10))
    assert result.outcome == "committed"
    assert result.version == version + 1
    assert result.files_removed == 12
    assert result.files_added == 1
    assert result.rows == len(before)
    assert model_rows(mirror) == before
    assert len(paths(mirror)) == 1
    assert dvs(mirror) == {}
    delta = mirror.table(TABLE)
    assert delta.transaction_version(mirror.query_id) == txn, "no txn: the batches are the same"
    (info,) = delta.history(1)
    assert info["operation"] == "OPTIMIZE"
    (path,) = paths(mirror)
    keys = pq.read_table(tmp_path / "root" / TABLE / path, columns=["id"])["id"].to_pylist()
    assert keys == sorted(keys), "the new file's rows are sorted by key"
    log = (tmp_path / "root" / TABLE / "_delta_log" / f"{version + 1:020d}.json").read_text()
    actions = [json.loads(line) for line in log.splitlines()]
    assert all(a[k]["dataChange"] is False for a in actions for k in ("add", "remove") if k in a)
    assert compact(mirror, CompactionPolicy()).outcome == "nothing"


def test_a_file_mostly_deleted_keeps_its_dv_in_the_apply_and_the_compaction_purges_it(
    tmp_path: Path,
) -> None:
    """The apply's cost follows its changes: it marks; rewriting is the compaction's."""
    mirror = Mirror(tmp_path / "root")
    load(mirror, 0, 10)
    load(mirror, 100, 10)
    (small,) = paths(mirror) - {p for p in paths(mirror) if "-b1-" in p}
    mirror.apply([(TABLE, "d", {"id": i}, {"id": i}, None) for i in range(6)])
    assert last_apply(mirror)["filesRewritten"] == 0
    assert dvs(mirror) == {small: 6}, "6 of 10 rows: marked, not rewritten"
    result = compact(mirror, CompactionPolicy(deleted_ratio=0.5))
    assert (result.outcome, result.files_removed, result.purged) == ("committed", 1, 1)
    assert small not in paths(mirror)
    assert dvs(mirror) == {}
    assert sorted(model_rows(mirror)) == [*range(6, 10), *range(100, 110)]


# -- races ----------------------------------------------------------------------------------


def _first_call_runs(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, before: Callable[[], None]
) -> None:
    """``module.name`` runs ``before`` once, at its first call, then itself."""
    original = getattr(module, name)
    calls: list[int] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            calls.append(1)
            before()
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)


def _spread(mirror: Mirror, batches: int) -> None:
    for batch in range(batches):
        load(mirror, 100 * batch, 10)


def test_a_compaction_whose_files_an_apply_changed_first_yields_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = Mirror(tmp_path / "root")
    _spread(mirror, 4)
    table_dir = tmp_path / "root" / TABLE
    files_before = set(p.name for p in table_dir.glob("*.parquet"))
    # The apply commits between the compaction's plan and its commit, marking a row of a file
    # the compaction is rewriting.
    apply = lambda: mirror.apply([(TABLE, "u", {"id": 101}, None, {"id": 101, "v": "x"})])  # noqa: E731
    _first_call_runs(monkeypatch, compaction, "create_entry", apply)
    result = compact(mirror, CompactionPolicy(min_files=4))
    assert result.outcome == "yielded"
    rows = model_rows(mirror)
    assert rows[101]["v"] == "x"
    assert len(rows) == 40
    new = set(p.name for p in table_dir.glob("*.parquet")) - files_before
    assert not any("compact" in name for name in new), "the yielded compaction's files deleted"
    monkeypatch.undo()
    assert compact(mirror, CompactionPolicy(min_files=4)).outcome == "committed"
    assert model_rows(mirror) == rows


def test_a_compaction_steps_over_a_commit_that_touched_none_of_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = Mirror(tmp_path / "root")
    _spread(mirror, 4)
    version = mirror.table(TABLE).version()
    # Only new keys: the apply adds a file and changes none of the compaction's.
    insert = lambda: load(mirror, 1000, 5)  # noqa: E731
    _first_call_runs(monkeypatch, compaction, "create_entry", insert)
    result = compact(mirror, CompactionPolicy(min_files=4))
    assert (result.outcome, result.version) == ("committed", version + 2)
    rows = model_rows(mirror)
    assert len(rows) == 45
    assert all(k in rows for k in range(1000, 1005))
    assert mirror.table(TABLE).transaction_version(mirror.query_id) == 4


def test_an_apply_that_loses_its_version_to_a_compaction_plans_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = Mirror(tmp_path / "root")
    _spread(mirror, 4)
    results: list[CompactionResult] = []
    run = lambda: results.append(compact(mirror, CompactionPolicy(min_files=4)))  # noqa: E731
    # The compaction commits between the apply's plan (which marks rows of two of the files it
    # rewrites) and the apply's commit: the apply must re-read and mark the compacted file.
    _first_call_runs(monkeypatch, dv_commit, "create_entry", run)
    mirror.apply(
        [
            (TABLE, "u", {"id": 5}, None, {"id": 5, "v": "y"}),
            (TABLE, "d", {"id": 205}, {"id": 205}, None),
        ]
    )
    assert [r.outcome for r in results] == ["committed"]
    rows = model_rows(mirror)
    assert rows[5]["v"] == "y"
    assert 205 not in rows
    assert len(rows) == 39
    delta = mirror.table(TABLE)
    assert delta.transaction_version(mirror.query_id) == 4
    assert [h["operation"] for h in delta.history(2)] == ["MERGE", "OPTIMIZE"]


def test_a_compaction_racing_every_apply_never_fails_one_or_changes_a_row(tmp_path: Path) -> None:
    """A thread compacts in a loop while 25 batches of random changes are applied."""
    mirror = Mirror(tmp_path / "root")
    _spread(mirror, 3)
    model = {k: "a" for b in range(3) for k in range(100 * b, 100 * b + 10)}
    stop = threading.Event()
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def compact_forever() -> None:
        policy = CompactionPolicy(deleted_ratio=0.1, min_files=2)
        while not stop.is_set():
            try:
                outcomes.append(compact(mirror, policy).outcome)
            except BaseException as e:  # any failure fails the test below
                errors.append(e)
                return

    thread = threading.Thread(target=compact_forever, daemon=True)
    thread.start()
    rng = random.Random(11)
    try:
        for batch in range(25):
            changes: list[Any] = []
            for key in rng.sample(range(320), 8):
                if key in model and rng.random() < 0.3:
                    changes.append((TABLE, "d", {"id": key}, {"id": key}, None))
                    del model[key]
                else:
                    model[key] = f"b{batch}"
                    changes.append((TABLE, "u", {"id": key}, None, {"id": key, "v": model[key]}))
            mirror.apply(changes)
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive(), "the compaction loop did not stop within 60 s"
    assert not errors, errors
    assert "committed" in outcomes, outcomes
    assert {k: r["v"] for k, r in model_rows(mirror).items()} == model
    assert mirror.table(TABLE).transaction_version(mirror.query_id) == 27


def test_a_table_where_commits_cannot_be_created_only_if_absent_is_skipped_unread() -> None:
    """GCS and Azure: no conditional write is wired, so nothing is read, written or committed."""
    result = compact_table(Location("gs://bucket/mirror/s.t"), CompactionPolicy(), KEYS)
    assert result.outcome == "skipped"
    assert "local disks and S3 only, not on gs" in result.reason


def test_a_compaction_after_the_write_tasks_looked_leaves_its_new_file_to_the_publisher(
    tmp_path: Path,
) -> None:
    """The tasks found the changed keys in files a compaction then replaced by one new file.

    Their marks name files the table no longer has; the publisher reads the compaction's file
    (added after the tasks looked) and marks the keys there.
    """
    mirror = Mirror(tmp_path / "root", marks="tasks")
    for batch in range(10):  # ten small files of 20 keys each
        mirror.apply(
            [
                (TABLE, "c", {"id": k}, None, {"id": k, "v": "a"})
                for k in range(batch * 20, batch * 20 + 20)
            ]
        )
    results: list[CompactionResult] = []
    mirror.apply_rows(
        [
            (TABLE, "u", {"id": 5}, None, {"id": 5, "v": "b"}),
            (TABLE, "d", {"id": 150}, {"id": 150}, None),
        ],
        meanwhile=lambda: results.append(compact(mirror, CompactionPolicy(min_files=10))),
    )
    assert [r.outcome for r in results] == ["committed"]
    (info,) = mirror.table(TABLE).history(1)
    assert info["spark-ckpt.mirror.filesRead"] == "1", "the compaction's file"
    assert info["spark-ckpt.mirror.filesReadByTasks"] == "2"
    assert info["spark-ckpt.mirror.rowsMarked"] == "2"
    rows = model_rows(mirror)
    assert len(rows) == 199
    assert rows[5]["v"] == "b"
    assert 150 not in rows
