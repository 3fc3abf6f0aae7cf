"""Mirror mode without a JVM: folding, typing, rewriting and committing with delta-rs.

Batches of change rows (the ``txn-cdc`` schema) are planned and applied exactly as the sink does
in its pre-commit and publish, against real Delta tables on local disk; the result is compared
with a plain dictionary model of the source tables.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.delta_reads import read_delta
from spark_ckpt.errors import MirrorChangeError, MirrorSchemaError
from spark_ckpt.sinks.mirror.fold import fold_changes
from spark_ckpt.sinks.mirror.plan import MirrorPlan
from spark_ckpt.sinks.mirror.precommit import plan_batch
from spark_ckpt.sinks.mirror.publish import apply_plan
from spark_ckpt.sinks.mirror.task_marks import combine, find_marks, key_sources
from spark_ckpt.sinks.mirror.types import arrow_type, parse_pg_array, to_arrow
from spark_ckpt.sinks.staging import staged_name, write_staged_file
from spark_ckpt.sources.postgres.types import spark_type
from spark_ckpt.sources.schema import ARROW_SCHEMA
from spark_ckpt.state.storage import Location

Change = tuple[str, str, dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]
"""(table, op, key, before, after)."""


T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def at(second: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=second)


def change_rows(
    changes: list[tuple[str, str, Any, Any, Any]],
    types: dict[str, str] | None = None,
    first_second: int = 0,
) -> pa.Table:
    columns: dict[str, list[Any]] = {f.name: [] for f in ARROW_SCHEMA}
    for index, (table, op, key, before, after) in enumerate(changes):
        values = {
            "source": "test",
            "txn_id": "t",
            "txn_order": 1,
            "txn_size": len(changes),
            "event_index": index,
            "commit_ts": at(first_second + index),  # one change per second
            "table": table,
            "op": op,
            "key": None if key is None else json.dumps(key),
            "before": before if before is None or isinstance(before, str) else json.dumps(before),
            "after": after if after is None or isinstance(after, str) else json.dumps(after),
        }
        for name, value in values.items():
            columns[name].append(value)
    rows = pa.Table.from_pydict(columns, schema=ARROW_SCHEMA)
    if types is not None:
        rows = rows.append_column("column_types", pa.array([json.dumps(types)] * len(changes)))
    return rows


class Mirror:
    """A mirror root on local disk, fed batch by batch as the sink feeds it.

    ``marks``: who finds the stored rows a batch replaces. ``publisher``: the publish reads the
    candidate files. ``tasks``: two write tasks (each half of the batch's changes) find them
    first (:mod:`~spark_ckpt.sinks.mirror.task_marks`). ``tasks-behind``: as the sink runs when
    the listener publishes late, the tasks of batch N look before N - 1 is published (N - 1 is
    planned, then N's tasks run, then N - 1 is published and N planned).
    """

    def __init__(
        self,
        root: Path,
        history: bool = False,
        deletion_vectors: bool = True,
        marks: str = "publisher",
    ) -> None:
        assert marks in ("publisher", "tasks", "tasks-behind")
        self.history = history
        self.deletion_vectors = deletion_vectors
        self.marks = marks
        self.seconds = 0
        self.root = Location(str(root))
        self.changelog = self.root.child("_changes")
        self.query_id = str(uuid.uuid4())
        self.batch = 0
        self.pending: tuple[MirrorPlan, int] | None = None

    def apply(self, changes: list[Change], types: dict[str, str] | None = None) -> None:
        self.apply_rows(changes, types)

    def apply_rows(
        self,
        changes: list[tuple[str, str, Any, Any, Any]],
        types: dict[str, str] | None = None,
        meanwhile: Callable[[], object] | None = None,
    ) -> None:
        """One batch; an image given as text (a schema change's ``after``) is kept as it is.

        ``meanwhile`` runs after the write tasks looked and before the batch is planned (a
        compaction, say, committed in between).
        """
        rows = change_rows(changes, types, self.seconds)
        self.seconds += len(changes)
        staged = write_staged_file(self.changelog, staged_name(self.query_id, self.batch, 0), rows)
        found = None
        if self.marks != "publisher":
            half = rows.num_rows // 2
            tasks = [rows.slice(0, half), rows.slice(half)]
            found = combine(
                mark
                for task in tasks
                if task.num_rows
                for mark in find_marks(
                    self.root,
                    pa.Table.from_batches([key_sources(b) for b in task.to_batches()]),
                    self.history,
                    min_files=0,
                )
            )
        self.flush()
        if meanwhile is not None:
            meanwhile()
        plan = plan_batch(
            self.root,
            self.changelog,
            [staged],
            self.query_id,
            self.batch,
            "a",
            self.history,
            deletion_vectors=self.deletion_vectors,
            marks=found,
        )
        self.pending = (plan, self.batch)
        if self.marks != "tasks-behind":
            self.flush()
        self.batch += 1

    def flush(self) -> None:
        """Publish the batch planned and not yet published, if any."""
        if self.pending is not None:
            plan, batch_id = self.pending
            self.pending = None
            apply_plan(plan, self.root.options, self.query_id, batch_id)

    def rows(self, table: str) -> list[dict[str, Any]]:
        self.flush()
        return read_delta(f"{self.root.path}/{table}").to_pylist()

    def table(self, table: str) -> DeltaTable:
        self.flush()
        return DeltaTable(f"{self.root.path}/{table}")


def by_id(rows: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {row["id"]: row for row in rows}


# -- folding --------------------------------------------------------------------------------


def test_fold_keeps_the_last_state_and_merges_partial_updates() -> None:
    folded = fold_changes(
        change_rows(
            [
                ("s.t", "c", {"id": 1}, None, {"id": 1, "a": 1, "big": "x"}),
                ("s.t", "u", {"id": 1}, None, {"id": 1, "a": 2}),  # big left out (TOAST)
                ("s.t", "u", {"id": 2}, None, {"id": 2, "a": 5}),  # big unknown: from storage
                ("s.t", "c", {"id": 3}, None, {"id": 3, "a": 7, "big": "y"}),
                ("s.t", "d", {"id": 3}, {"id": 3}, None),
            ]
        )
    )["s.t"]
    assert folded.key_columns == ("id",)
    assert folded.rows[(1,)].values == {"id": 1, "a": 2, "big": "x"}
    assert folded.rows[(1,)].given is None  # an insert then an update: the row is whole
    assert folded.rows[(2,)].given == frozenset({"id", "a"})
    assert folded.rows[(3,)].values is None
    assert folded.changes == 5


def test_a_key_update_deletes_the_old_key_and_remembers_where_missing_values_are() -> None:
    folded = fold_changes(change_rows([("s.t", "u", {"id": 9}, {"id": 4}, {"id": 9, "a": 1})]))[
        "s.t"
    ]
    assert folded.rows[(4,)].values is None
    assert folded.rows[(9,)].from_key == (4,)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("s.t", "c", {}, None, {"id": 1}), "no primary key"),
        (("s.t", "x", {"id": 1}, None, {"id": 1}), "unknown change op"),
        (("s.t", "c", {"id": 1}, None, None), "no 'after' image"),
    ],
)
def test_changes_a_mirror_cannot_apply_are_refused(change: Change, words: str) -> None:
    with pytest.raises(MirrorChangeError, match=words):
        fold_changes(change_rows([change]))


# -- types ----------------------------------------------------------------------------------


def test_type_names_map_to_arrow() -> None:
    assert arrow_type("decimal(12, 2)") == pa.decimal128(12, 2)
    assert arrow_type("array<timestamp_ntz>") == pa.list_(pa.timestamp("us"))
    assert arrow_type("timestamp") == pa.timestamp("us", tz="UTC")
    with pytest.raises(MirrorChangeError, match="not one a mirror can hold"):
        arrow_type("map<string,int>")


def test_values_convert_exactly_or_are_refused_with_where() -> None:
    assert to_arrow(["12345678901.25", None], pa.decimal128(13, 2), "t", "c").to_pylist() == [
        Decimal("12345678901.25"),
        None,
    ]
    moment = to_arrow(["2026-01-01 05:30:00.000001+05:30"], pa.timestamp("us", tz="UTC"), "t", "c")
    assert moment[0].as_py() == dt.datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=dt.timezone.utc)
    naive = to_arrow(["2026-01-01 05:30:00"], pa.timestamp("us"), "t", "c")
    assert naive[0].as_py() == dt.datetime(2026, 1, 1, 5, 30)
    assert to_arrow(["\\x00ff", "AP8="], pa.binary(), "t", "c").to_pylist() == [b"\x00\xff"] * 2
    assert to_arrow(["NaN", "-Infinity"], pa.float64(), "t", "c").to_pylist()[1] == float("-inf")
    arrays = to_arrow(["{1,NULL,3}", "{}"], pa.list_(pa.int32()), "t", "c").to_pylist()
    assert arrays == [[1, None, 3], []]
    for value, kind in [
        ("NaN", pa.decimal128(5, 2)),
        ("1.234", pa.decimal128(5, 2)),
        ("2026-01-01 00:00:00", pa.timestamp("us", tz="UTC")),
        ("{{1},{2}}", pa.list_(pa.int32())),
        ("yes", pa.bool_()),
    ]:
        with pytest.raises(MirrorChangeError, match="table t, column 'c'"):
            to_arrow([value], kind, "t", "c")


def test_postgres_array_literals_parse_with_quotes_and_nulls() -> None:
    assert parse_pg_array('{"a b","q\\"u",NULL,"NULL",plain}') == [
        "a b",
        'q"u',
        None,
        "NULL",
        "plain",
    ]


@pytest.mark.parametrize(
    ("pg", "spark"),
    [
        ("integer", "int"),
        ("numeric(12,2)", "decimal(12,2)"),
        ("numeric(40,2)", "string"),
        ("numeric", "string"),
        ("timestamp(3) with time zone", "timestamp"),
        ("timestamp without time zone", "timestamp_ntz"),
        ("character varying(20)[]", "array<string>"),
        ("double precision[]", "array<double>"),
        ("bytea", "binary"),
        ("jsonb", "string"),
        ("uuid", "string"),
    ],
)
def test_postgres_types_map_to_spark_types(pg: str, spark: str) -> None:
    assert spark_type(pg) == spark


# -- applying to Delta tables ---------------------------------------------------------------


def test_a_batch_rewrites_only_the_files_holding_its_keys(tmp_path: Path) -> None:
    """Copy-on-write (``deletionVectors=false``): the file holding a changed key is replaced."""
    mirror = Mirror(tmp_path / "root", deletion_vectors=False)
    for first in (0, 100, 200):  # three files with disjoint key ranges
        mirror.apply(
            [("s.t", "c", {"id": i}, None, {"id": i, "v": "a"}) for i in range(first, first + 50)]
        )
    before = {
        a["path"] for a in pa.table(mirror.table("s.t").get_add_actions(flatten=True)).to_pylist()
    }
    mirror.apply(
        [
            ("s.t", "u", {"id": 120}, None, {"id": 120, "v": "b"}),
            ("s.t", "c", {"id": 999}, None, {"id": 999, "v": "new"}),
        ]
    )
    after = {
        a["path"] for a in pa.table(mirror.table("s.t").get_add_actions(flatten=True)).to_pylist()
    }
    assert len(before - after) == 1, "only the file with key 120 is replaced"
    assert len(after - before) == 2, "its replacement, and one file of new keys"
    rows = by_id(mirror.rows("s.t"))
    assert rows[120]["v"] == "b"
    assert rows[999]["v"] == "new"
    assert len(rows) == 151


def test_applying_a_published_batch_again_changes_nothing(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "root")
    mirror.apply([("s.t", "c", {"id": 1}, None, {"id": 1, "v": "a"})])
    rows = change_rows([("s.t", "u", {"id": 1}, None, {"id": 1, "v": "b"})])
    staged = write_staged_file(mirror.changelog, staged_name(mirror.query_id, 1, 0), rows)
    plan = plan_batch(mirror.root, mirror.changelog, [staged], mirror.query_id, 1, "a")
    apply_plan(plan, mirror.root.options, mirror.query_id, 1)
    version = mirror.table("s.t").version()
    apply_plan(plan, mirror.root.options, mirror.query_id, 1)  # a second publisher, or a retry
    assert mirror.table("s.t").version() == version
    assert mirror.table("_checkpoints").transaction_version(mirror.query_id) == 1
    assert mirror.rows("s.t") == [{"id": 1, "v": "b"}]


def test_a_changed_column_type_is_refused_in_the_plan(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "root")
    mirror.apply([("s.t", "c", {"id": 1}, None, {"id": 1, "v": "text"})])
    with pytest.raises(MirrorSchemaError, match="column 'v' is string in the mirror"):
        mirror.apply([("s.t", "c", {"id": 2}, None, {"id": 2, "v": 5})])
    assert mirror.table("s.t").version() == 0


def test_typed_columns_and_a_column_added_later(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "root")
    types = {"id": "bigint", "total": "decimal(12,2)", "at": "timestamp"}
    mirror.apply(
        [("s.t", "c", {"id": 1}, None, {"id": 1, "total": "1.10", "at": "2026-01-01 00:00:00+00"})],
        types,
    )
    mirror.apply(
        [("s.t", "u", {"id": 1}, None, {"id": 1, "total": "2.20", "at": None, "tag": "x"})],
        {**types, "tag": "string"},
    )
    schema = json.loads(mirror.table("s.t").schema().to_json())["fields"]
    assert [(f["name"], f["type"]) for f in schema] == [
        ("id", "long"),
        ("total", "decimal(12,2)"),
        ("at", "timestamp"),
        ("tag", "string"),
    ]
    assert mirror.rows("s.t") == [{"id": 1, "total": Decimal("2.20"), "at": None, "tag": "x"}]


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["c", "u", "d", "k"]),  # k: a key update
        st.integers(0, 6),
        st.integers(0, 6),
        st.booleans(),  # an update that leaves the text column out (unchanged TOAST)
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(_OPS, min_size=1, max_size=4),
    history=st.booleans(),
    marks=st.sampled_from(["publisher", "tasks", "tasks-behind"]),
)
def test_any_change_history_leaves_the_mirror_equal_to_the_source(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[list[tuple[str, int, int, bool]]],
    history: bool,
    marks: str,
) -> None:
    """SCD 1: the mirror is the source. SCD 2: its current versions are, and versions chain.

    Whoever finds the rows a batch replaces: the publisher, the write tasks, or the write tasks
    against the table before the previous batch was published.
    """
    mirror = Mirror(tmp_path_factory.mktemp("mirror"), history, marks=marks)
    source: dict[int, dict[str, Any]] = {}
    counter = 0
    for ops in batches:
        changes: list[Change] = []
        for op, key, other, partial in ops:
            counter += 1
            if op == "c" and key not in source:
                source[key] = {"id": key, "n": counter, "text": f"t{counter}"}
                changes.append(("s.t", "c", {"id": key}, None, dict(source[key])))
            elif op == "u" and key in source:
                source[key] = {**source[key], "n": counter}
                image = dict(source[key])
                if partial:
                    del image["text"]
                changes.append(("s.t", "u", {"id": key}, None, image))
            elif op == "d" and key in source:
                del source[key]
                changes.append(("s.t", "d", {"id": key}, {"id": key}, None))
            elif op == "k" and key in source and other not in source:
                row = source.pop(key)
                source[other] = {**row, "id": other}
                image = dict(source[other])
                if partial:
                    del image["text"]
                changes.append(("s.t", "u", {"id": other}, {"id": key}, image))
        if changes:
            mirror.apply(changes)
    if not mirror.batch:
        return
    mirror.flush()
    rows = mirror.rows("s.t") if (Path(mirror.root.path) / "s.t").exists() else []
    if not history:
        assert by_id(rows) == source
        return
    current = [{k: v for k, v in r.items() if not k.startswith("__")} for r in rows]
    assert by_id([c for c, r in zip(current, rows, strict=True) if r["__end_at"] is None]) == source
    chains: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        chains.setdefault(row["id"], []).append(row)
    for versions in chains.values():
        versions.sort(key=lambda r: r["__start_at"])
        for earlier, later in itertools.pairwise(versions):
            assert earlier["__end_at"] is not None
            assert earlier["__end_at"] <= later["__start_at"]
        assert sum(v["__end_at"] is None for v in versions) <= 1


def test_scd2_keeps_every_version_with_its_validity(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "root", history=True)
    mirror.apply(  # seconds 0, 1
        [
            ("s.t", "c", {"id": 1}, None, {"id": 1, "v": "a"}),
            ("s.t", "c", {"id": 2}, None, {"id": 2, "v": "b"}),
        ]
    )
    mirror.apply(  # seconds 2..6
        [
            ("s.t", "u", {"id": 1}, None, {"id": 1, "v": "a2"}),
            ("s.t", "u", {"id": 1}, None, {"id": 1, "v": "a3"}),
            ("s.t", "d", {"id": 2}, {"id": 2}, None),
            ("s.t", "c", {"id": 3}, None, {"id": 3, "v": "c"}),
            ("s.t", "u", {"id": 4}, {"id": 3}, {"id": 4, "v": "c"}),  # a key update
        ]
    )
    rows = {(r["id"], r["v"], r["__start_at"], r["__end_at"]) for r in mirror.rows("s.t")}
    assert rows == {
        (1, "a", at(0), at(2)),
        (1, "a2", at(2), at(3)),
        (1, "a3", at(3), None),
        (2, "b", at(1), at(4)),
        (3, "c", at(5), at(6)),
        (4, "c", at(6), None),
    }


def test_the_index_names_every_mirror_at_every_checkpoint(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path / "root")
    mirror.apply([("s.a", "c", {"id": 1}, None, {"id": 1})])
    mirror.apply([("s.b", "c", {"id": 1}, None, {"id": 1})])
    mirror.apply([("s.a", "c", {"id": 2}, None, {"id": 2})])
    index = mirror.table("_checkpoints")
    rows = index.to_pyarrow_table().to_pylist()
    at_2 = {r["table"]: r["version"] for r in rows if r["checkpoint_id"] == 2}
    assert at_2 == {"s.a": 1, "s.b": 0}  # s.b untouched by batch 2, still named
    assert {r["checkpoint_id"] for r in rows} == {0, 1, 2}
    # The newest commit repeats its rows, so the next publish reads one commit, not the index.
    newest = index.history(1)[0]
    assert json.loads(newest["spark-ckpt.mirrorVersions"]) == {
        "s.a": ["s.a", 1],
        "s.b": ["s.b", 0],
    }


def test_a_publisher_that_finds_the_folded_changes_gone_accepts_a_table_holding_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It saw batch 1 unpublished; a racing publisher then finished 1 and deleted its staging."""
    from spark_ckpt.sinks.mirror import precommit, publish

    mirror = Mirror(tmp_path / "root")
    mirror.apply([("s.t", "c", {"id": 1}, None, {"id": 1, "v": "a"})])
    rows = change_rows([("s.t", "u", {"id": 1}, None, {"id": 1, "v": "b"})])
    staged = write_staged_file(mirror.changelog, staged_name(mirror.query_id, 1, 0), rows)
    plan = plan_batch(mirror.root, mirror.changelog, [staged], mirror.query_id, 1, "a")
    apply_plan(plan, mirror.root.options, mirror.query_id, 1)
    precommit.discard_staging(mirror.root, 1)
    stale = [DeltaTable(f"{mirror.root.path}/s.t", version=0)]  # what it read before the race
    real = publish.load_table
    monkeypatch.setattr(
        publish, "load_table", lambda location: stale.pop() if stale else real(location)
    )
    version = mirror.table("s.t").version()
    assert publish._apply_table(mirror.root, plan.tables[0], mirror.query_id, 1) == version
    assert not stale, "the stale snapshot was not the one the publisher started from"
    assert mirror.table("s.t").version() == version
    assert mirror.rows("s.t") == [{"id": 1, "v": "b"}]
