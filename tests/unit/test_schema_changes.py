"""Schema change events, the mirror's behaviors, and folding rows across a change (no JVM)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_mirror_apply import Mirror

from spark_ckpt.errors import MirrorSchemaError, SchemaChangeError
from spark_ckpt.model.schema_changes import (
    ColumnSchema,
    SchemaEvent,
    TableSchema,
    diff_schemas,
    is_widening,
)
from spark_ckpt.sinks.mirror.evolution import ProjectedColumn, follow, identity, needs_rewrite
from spark_ckpt.sinks.mirror.fold import fold_changes
from spark_ckpt.sources.schema import ARROW_SCHEMA


def _col(name: str, kind: str, column_id: int | None, **more: Any) -> ColumnSchema:
    return ColumnSchema(name, kind, kind, id=column_id, **more)


ID, PRICE = _col("id", "int", 1), _col("price", "decimal(10,2)", 3)
BEFORE = TableSchema((ID, _col("name", "string", 2), PRICE), ("id",))


def _event(*columns: ColumnSchema, before: TableSchema = BEFORE) -> SchemaEvent:
    after = TableSchema(columns, ("id",))
    return SchemaEvent("public.p", before, after, diff_schemas(before, after))


def test_a_rename_keeps_the_column_id_and_is_told_from_a_drop_and_an_add() -> None:
    renamed = _event(
        _col("id", "int", 1), _col("title", "string", 2), _col("price", "decimal(10,2)", 3)
    )
    assert [c.describe() for c in renamed.changes] == ["column_renamed name -> title"]
    assert renamed.column_mapping() == {"id": "id", "name": "title", "price": "price"}
    replaced = _event(
        _col("id", "int", 1), _col("price", "decimal(10,2)", 3), _col("title", "string", 4)
    )
    assert [c.kind for c in replaced.changes] == ["column_dropped", "column_added"]
    assert replaced.column_mapping()["name"] is None


def test_a_swap_of_two_names_is_one_mapping_and_a_re_added_name_is_a_new_column() -> None:
    swapped = _event(
        _col("id", "int", 1), _col("price", "string", 2), _col("name", "decimal(10,2)", 3)
    )
    assert swapped.column_mapping() == {"id": "id", "name": "price", "price": "name"}
    readded = _event(_col("id", "int", 1), _col("name", "string", 2), _col("price", "int", 4))
    assert readded.column_mapping()["price"] is None
    assert [c.name for c in readded.added()] == ["price"]


def test_without_ids_a_disappeared_and_an_appeared_column_are_ambiguous() -> None:
    plain = TableSchema((_col("id", "int", None), _col("name", "string", None)), ("id",))
    event = _event(_col("id", "int", None), _col("title", "string", None), before=plain)
    assert event.ambiguous() == ("name",)
    with pytest.raises(MirrorSchemaError, match="no column ids"):
        follow(identity([("id", "int"), ("name", "string")]), event, "evolve", "here")


def test_events_round_trip_through_the_change_row() -> None:
    event = _event(
        _col("id", "bigint", 1),
        _col("title", "string", 2),
        _col("flag", "boolean", 4, default=True),
    )
    parsed = SchemaEvent.from_row("public.p", event.before_json(), event.after_json())
    assert parsed == event
    assert json.loads(event.after_json())["columns"][2]["default"] is True


@pytest.mark.parametrize(
    ("old", "new", "widens"),
    [
        ("int", "bigint", True),
        ("smallint", "int", True),
        ("bigint", "int", False),
        ("float", "double", True),
        ("int", "double", True),
        ("bigint", "double", False),
        ("decimal(10,2)", "decimal(14,2)", True),
        ("decimal(10,2)", "decimal(11,3)", True),
        ("decimal(10,2)", "decimal(10,3)", False),
        ("int", "decimal(12,2)", True),
        ("int", "decimal(9,0)", False),
        ("date", "timestamp_ntz", True),
        ("string", "int", False),
        ("string", "string", True),
    ],
)
def test_widening_is_what_delta_type_widening_allows(old: str, new: str, widens: bool) -> None:
    assert is_widening(old, new) is widens


STORED = [
    ("id", "int"),
    ("name", "string"),
    ("price", "decimal(10,2)"),
    ("__start_at", "timestamp"),
]


def test_evolve_renames_drops_widens_and_fills_an_added_columns_default() -> None:
    event = _event(
        _col("id", "bigint", 1),
        _col("title", "string", 2),
        _col("flag", "boolean", 4, default=True),
    )
    projection = follow(identity(STORED), event, "evolve", "here")
    assert projection == (
        ProjectedColumn("id", "bigint", "id"),
        ProjectedColumn("title", "string", "name"),
        ProjectedColumn("__start_at", "timestamp", "__start_at"),  # not the source's: kept
        ProjectedColumn("flag", "boolean", None, True),
    )
    assert needs_rewrite(projection, STORED)


def test_only_nullable_additions_need_no_rewrite() -> None:
    event = _event(*BEFORE.columns, _col("note", "string", 4))
    projection = follow(identity(STORED), event, "evolve", "here")
    assert projection[-1] == ProjectedColumn("note", "string", None)
    assert not needs_rewrite(projection, STORED)


def test_lenient_keeps_dropped_and_renamed_columns_and_ignore_keeps_everything() -> None:
    event = _event(_col("id", "int", 1), _col("title", "string", 2))
    lenient = follow(identity(STORED), event, "lenient", "here")
    assert [c.name for c in lenient] == ["id", "name", "title", "price", "__start_at"]
    assert lenient[2] == ProjectedColumn("title", "string", None)
    assert not needs_rewrite(lenient, STORED)
    assert follow(identity(STORED), event, "ignore", "here") == identity(STORED)


def test_fail_names_the_table_the_change_and_the_position() -> None:
    event = _event(
        _col("id", "int", 1), _col("title", "string", 2), _col("price", "decimal(10,2)", 3)
    )
    with pytest.raises(SchemaChangeError, match=r"public\.p.*column_renamed name -> title.*txn 7"):
        follow(identity(STORED), event, "fail", "txn 7")


def test_a_narrowing_or_an_unknown_default_cannot_be_followed() -> None:
    narrowed = _event(
        _col("id", "int", 1), _col("name", "int", 2), _col("price", "decimal(10,2)", 3)
    )
    with pytest.raises(MirrorSchemaError, match="not a widening"):
        follow(identity(STORED), narrowed, "evolve", "here")
    rewritten = _event(*BEFORE.columns, _col("r", "double", 4, default_unknown=True))
    with pytest.raises(MirrorSchemaError, match="volatile default"):
        follow(identity(STORED), rewritten, "lenient", "here")


def _rows(*changes: tuple[str, str, dict[str, Any] | None, str | None, str | None]) -> pa.Table:
    n = len(changes)
    at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    columns = {
        "source": ["t"] * n,
        "txn_id": [str(i) for i in range(n)],
        "txn_order": list(range(n)),
        "txn_size": [1] * n,
        "event_index": [0] * n,
        "commit_ts": [at] * n,
        "table": [c[0] for c in changes],
        "op": [c[1] for c in changes],
        "key": [None if c[2] is None else json.dumps(c[2]) for c in changes],
        "before": [c[3] for c in changes],
        "after": [c[4] for c in changes],
    }
    return pa.Table.from_pydict(columns, schema=ARROW_SCHEMA)


def test_rows_folded_before_a_change_are_carried_over_to_the_new_schema() -> None:
    event = _event(
        _col("id", "int", 1),
        _col("title", "string", 2),
        _col("flag", "boolean", 4, default=True),
    )
    changes = _rows(
        ("public.p", "c", {"id": 1}, None, json.dumps({"id": 1, "name": "a", "price": "1.00"})),
        ("public.p", "u", {"id": 2}, None, json.dumps({"id": 2, "name": "b"})),
        ("public.p", "s", None, event.before_json(), event.after_json()),
        ("public.p", "c", {"id": 3}, None, json.dumps({"id": 3, "title": "c", "flag": False})),
    )
    folded = fold_changes(changes)["public.p"]
    assert folded.rows[(1,)].values == {"id": 1, "title": "a", "flag": True}
    assert folded.rows[(2,)].values == {"id": 2, "title": "b"}  # an update: the rest is stored
    assert folded.rows[(2,)].given == frozenset({"id", "title"})
    assert folded.rows[(3,)].values == {"id": 3, "title": "c", "flag": False}
    assert [e for e, _ in folded.schema_events] == [event]
    kept = fold_changes(changes, keeps_schema=lambda table: True)["public.p"]
    assert kept.rows[(1,)].values == {"id": 1, "name": "a", "price": "1.00"}


# -- applied to real Delta tables (delta-rs, no JVM) ---------------------------------------------


def _schema_row(event: SchemaEvent) -> tuple[str, str, None, str | None, str]:
    return ("public.p", "s", None, event.before_json(), event.after_json())


def test_a_mirror_follows_a_rename_drop_widening_and_default_in_one_commit(
    tmp_path: Path,
) -> None:
    mirror = Mirror(tmp_path)
    types = {"id": "int", "name": "string", "price": "decimal(10,2)"}
    mirror.apply(
        [
            ("public.p", "c", {"id": i}, None, {"id": i, "name": f"n{i}", "price": "1.50"})
            for i in (1, 2)
        ],
        types,
    )
    event = _event(
        _col("id", "bigint", 1),
        _col("title", "string", 2),
        _col("flag", "boolean", 4, default=True),
    )
    mirror.apply_rows(
        [
            _schema_row(event),
            ("public.p", "u", {"id": 2}, None, {"id": 2, "title": "t2", "flag": False}),
        ]
    )
    rows = sorted(mirror.rows("public.p"), key=lambda r: r["id"])
    assert rows == [
        {"id": 1, "title": "n1", "flag": True},
        {"id": 2, "title": "t2", "flag": False},
    ]
    table = mirror.table("public.p")
    assert [f.name for f in table.schema().fields] == ["id", "title", "flag"]
    ours = [c for c in table.history() if c.get("spark-ckpt.batchId") == 1]
    assert len(ours) == 1  # the rewrite and the batch's rows: one commit
    # No column mapping (a rename rewrites the files): the table needs only deletion vectors.
    assert table.protocol().reader_features == ["deletionVectors"]


def test_a_mirror_created_by_a_batch_with_schema_changes_keeps_the_sources_column_order(
    tmp_path: Path,
) -> None:
    """The first batch holds the table's first rows and a column added after them."""
    mirror = Mirror(tmp_path)
    types = {"id": "int", "name": "string", "price": "decimal(10,2)"}
    event = _event(ID, _col("name", "string", 2), PRICE, _col("note", "string", 4))
    mirror.apply_rows(
        [
            ("public.p", "c", {"id": 1}, None, {"id": 1, "name": "n1", "price": "1.50"}),
            _schema_row(event),
            (
                "public.p",
                "c",
                {"id": 2},
                None,
                {"id": 2, "name": "n2", "price": "2.50", "note": "x"},
            ),
        ],
        types,
    )
    table = mirror.table("public.p")
    assert [f.name for f in table.schema().fields] == ["id", "name", "price", "note"]


def test_an_scd2_mirror_renames_every_version(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path, history=True)
    types = {"id": "int", "name": "string", "price": "decimal(10,2)"}
    mirror.apply(
        [("public.p", "c", {"id": 1}, None, {"id": 1, "name": "a", "price": "1.00"})], types
    )
    mirror.apply(
        [("public.p", "u", {"id": 1}, None, {"id": 1, "name": "b", "price": "1.00"})], types
    )
    event = _event(ID, _col("title", "string", 2), PRICE)
    mirror.apply_rows(
        [
            _schema_row(event),
            ("public.p", "u", {"id": 1}, None, {"id": 1, "title": "c", "price": "2.00"}),
        ]
    )
    versions = sorted(mirror.rows("public.p"), key=lambda r: r["__start_at"])
    assert [v["title"] for v in versions] == ["a", "b", "c"]
    assert "name" not in versions[0]
    assert [v["__end_at"] is None for v in versions] == [False, False, True]


def test_a_column_dropped_without_a_reported_change_stops_the_mirror(tmp_path: Path) -> None:
    """A connector that reports no schema change: inserts without a mirror column are refused."""
    mirror = Mirror(tmp_path)
    mirror.apply([("public.p", "c", {"id": 1}, None, {"id": 1, "name": "a", "price": 1})])
    mirror.apply(  # a column added without a report: earlier rows of the batch lack it rightly
        [
            ("public.p", "c", {"id": 2}, None, {"id": 2, "name": "b", "price": 2}),
            ("public.p", "c", {"id": 3}, None, {"id": 3, "name": "c", "price": 3, "note": "x"}),
        ]
    )
    with pytest.raises(MirrorSchemaError, match=r"no column price.*no\s+schema change"):
        mirror.apply([("public.p", "c", {"id": 4}, None, {"id": 4, "name": "d", "note": "y"})])
