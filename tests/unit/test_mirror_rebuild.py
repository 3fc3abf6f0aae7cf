"""Rebuilding one mirror table from a new read of its source, beside the others (no JVM).

A schema change no mirror can follow in place (``text`` to ``int``) arrives as a ``rebuild=
'begin'`` schema change row; the table's rows from there (the new read's ``op='r'`` rows and the
stream's changes) build a shadow table while the published table and the checkpoint index stay
as they were before the change; the ``rebuild='end'`` row publishes the rebuilt table in the
same checkpoint as every other table's rows of its batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from test_mirror_apply import Mirror, change_rows

from harness.delta_reads import read_delta
from spark_ckpt.errors import MirrorSchemaError, SchemaChangeError
from spark_ckpt.model.schema_changes import (
    ColumnSchema,
    SchemaEvent,
    TableSchema,
    diff_schemas,
    rebuild_reason,
)
from spark_ckpt.sinks.mirror.fold import row_position
from spark_ckpt.sinks.mirror.precommit import plan_batch
from spark_ckpt.sinks.mirror.rebuild import RebuildState, split_rebuilds
from spark_ckpt.sinks.staging import staged_name, write_staged_file

TABLE, OTHER = "public.p", "public.q"
# bigint: the types the mirror infers from these rows' values (they carry no column types).
OLD = TableSchema(
    (ColumnSchema("id", "bigint", "bigint", id=1), ColumnSchema("sku", "string", "text", id=2)),
    ("id",),
)
NEW = TableSchema(
    (ColumnSchema("id", "bigint", "bigint", id=1), ColumnSchema("sku", "bigint", "bigint", id=2)),
    ("id",),
)
BEGIN = SchemaEvent(TABLE, OLD, NEW, diff_schemas(OLD, NEW), "begin")
END = SchemaEvent(TABLE, NEW, NEW, (), "end")


def _row(event: SchemaEvent) -> tuple[str, str, None, str | None, str]:
    return (event.table, "s", None, event.before_json(), event.after_json())


def _index(mirror: Mirror) -> list[dict[str, Any]]:
    rows = DeltaTable(f"{mirror.root.path}/_checkpoints").to_pyarrow_table().to_pylist()
    return sorted(rows, key=lambda r: (r["checkpoint_id"], r["table"]))


def _at(mirror: Mirror, checkpoint: int) -> dict[str, dict[str, Any]]:
    return {r["table"]: r for r in _index(mirror) if r["checkpoint_id"] == checkpoint}


def _rows(mirror: Mirror, table: str, version: int | None = None) -> list[dict[str, Any]]:
    rows = read_delta(f"{mirror.root.path}/{table}", version)
    return sorted(rows.to_pylist(), key=lambda r: r["id"])


def test_what_a_mirror_cannot_follow_in_place_is_a_rebuild_and_the_marks_round_trip() -> None:
    assert rebuild_reason(BEGIN) is not None
    assert "sku" in str(rebuild_reason(BEGIN))
    wider = TableSchema((OLD.columns[0], ColumnSchema("sku", "string", "text", id=2)), ("id",))
    assert rebuild_reason(SchemaEvent(TABLE, OLD, wider, diff_schemas(OLD, wider))) is None
    unknown = TableSchema(
        (*OLD.columns, ColumnSchema("t", "timestamp", "timestamptz", id=3, default_unknown=True)),
        ("id",),
    )
    assert "t" in str(rebuild_reason(SchemaEvent(TABLE, OLD, unknown, ())))
    for event in (BEGIN, END):
        assert SchemaEvent.from_row(TABLE, event.before_json(), event.after_json()) == event


def test_a_rebuild_publishes_the_new_table_at_its_end_and_the_old_one_until_then(
    tmp_path: Path,
) -> None:
    mirror = Mirror(tmp_path)
    mirror.apply(
        [(TABLE, "c", {"id": i}, None, {"id": i, "sku": f"s{i}"}) for i in (1, 2, 3)]
        + [(OTHER, "c", {"id": 1}, None, {"id": 1, "v": "a"})]
    )
    old = _rows(mirror, TABLE)
    # Batch 1: the change, the stream's update under the new schema, the first chunk (id 1, 2).
    mirror.apply_rows(
        [
            (TABLE, "c", {"id": 4}, None, {"id": 4, "sku": "s4"}),  # before the change
            _row(BEGIN),
            (TABLE, "u", {"id": 3}, None, {"id": 3, "sku": 30}),
            (OTHER, "u", {"id": 1}, None, {"id": 1, "v": "b"}),
            (TABLE, "r", {"id": 1}, None, {"id": 1, "sku": 10}),
            (TABLE, "r", {"id": 2}, None, {"id": 2, "sku": 20}),
        ]
    )
    index = _at(mirror, 1)
    assert "column_type_changed sku" in index[TABLE]["rebuilding"]
    assert index[OTHER]["rebuilding"] is None
    assert _rows(mirror, OTHER) == [{"id": 1, "v": "b"}]  # the other table streams on
    # The table as it was right before the change, for as long as the rebuild runs.
    before_change = [*old, {"id": 4, "sku": "s4"}]
    assert _rows(mirror, TABLE, index[TABLE]["version"]) == before_change
    assert _rows(mirror, TABLE) == before_change
    # Batch 2: a delete, the last chunk (id 4 was deleted before the read), the end.
    mirror.apply_rows(
        [
            (TABLE, "d", {"id": 2}, {"id": 2}, None),
            (TABLE, "r", {"id": 3}, None, {"id": 3, "sku": 30}),
            (TABLE, "c", {"id": 5}, None, {"id": 5, "sku": 50}),
            _row(END),
            (TABLE, "u", {"id": 1}, None, {"id": 1, "sku": 11}),  # after the end
        ]
    )
    index = _at(mirror, 2)
    assert index[TABLE]["rebuilding"] is None
    assert index[TABLE]["version"] > _at(mirror, 1)[TABLE]["version"]
    assert _rows(mirror, TABLE, index[TABLE]["version"]) == [
        {"id": 1, "sku": 11},
        {"id": 3, "sku": 30},
        {"id": 5, "sku": 50},
    ]
    fields = DeltaTable(f"{mirror.root.path}/{TABLE}").schema().fields
    assert [(f.name, f.type.type) for f in fields] == [("id", "long"), ("sku", "long")]
    assert not (tmp_path / "_spark_ckpt" / "rebuild").exists() or not any(
        (tmp_path / "_spark_ckpt" / "rebuild").iterdir()
    ), "the shadow table was left behind"
    # Later batches apply to the rebuilt table as to any mirror.
    mirror.apply_rows([(TABLE, "u", {"id": 3}, None, {"id": 3, "sku": 31})])
    assert _rows(mirror, TABLE)[1] == {"id": 3, "sku": 31}


def test_a_new_rebuild_replaces_one_in_progress_and_fail_stops_at_its_begin(
    tmp_path: Path,
) -> None:
    mirror = Mirror(tmp_path)
    mirror.apply(
        [(TABLE, "c", {"id": 1}, None, {"id": 1, "sku": "a"})], {"id": "int", "sku": "string"}
    )
    mirror.apply_rows([_row(BEGIN), (TABLE, "r", {"id": 9}, None, {"id": 9, "sku": 9})])
    first = DeltaTable(f"{mirror.root.path}/_checkpoints").history(1)[0]
    assert "_spark_ckpt/rebuild/public.p-1" in str(first["spark-ckpt.rebuilding"])
    mirror.apply_rows([_row(BEGIN), (TABLE, "r", {"id": 1}, None, {"id": 1, "sku": 1}), _row(END)])
    assert _rows(mirror, TABLE) == [{"id": 1, "sku": 1}]  # nothing of the superseded read
    assert not (tmp_path / "_spark_ckpt" / "rebuild" / "public.p-1").exists()

    failing = Mirror(tmp_path / "fail")
    failing.apply([(TABLE, "c", {"id": 1}, None, {"id": 1, "sku": "a"})])
    rows = change_rows([_row(BEGIN)])
    staged = write_staged_file(failing.changelog, staged_name(failing.query_id, 1, 0), rows)
    with pytest.raises(SchemaChangeError, match="column_type_changed sku"):
        plan_batch(
            failing.root,
            failing.changelog,
            [staged],
            failing.query_id,
            1,
            "a",
            behavior_of=lambda table: "fail",
        )


def test_the_split_puts_a_tables_rows_from_its_begin_into_the_shadow() -> None:
    rows = change_rows(
        [
            (TABLE, "c", {"id": 1}, None, {"id": 1, "sku": "x"}),
            (OTHER, "c", {"id": 1}, None, {"id": 1}),
            _row(BEGIN),
            (TABLE, "r", {"id": 1}, None, {"id": 1, "sku": 1}),
            (OTHER, "c", {"id": 2}, None, {"id": 2}),
        ]
    )
    split = split_rebuilds(rows, {}, lambda table: True, row_position)
    assert split.published.column("table").to_pylist() == [TABLE, OTHER, OTHER]
    assert split.shadow.column("op").to_pylist() == ["s", "r"]
    assert list(split.begun) == [TABLE]
    # A table rebuilding since an earlier batch: all its rows go to the shadow.
    going = {TABLE: RebuildState(TABLE, "_spark_ckpt/rebuild/public.p-0", 0, "why")}
    later = change_rows([(TABLE, "u", {"id": 1}, None, {"id": 1, "sku": 2})])
    split = split_rebuilds(later, going, lambda table: True, row_position)
    assert split.published.num_rows == 0
    assert split.shadow.num_rows == 1
    # Under ignore the marks are plain schema change rows.
    split = split_rebuilds(rows, {}, lambda table: False, row_position)
    assert split.shadow.num_rows == 0
    assert isinstance(split.published, pa.Table)
    assert split.published.num_rows == rows.num_rows


def test_an_scd2_mirror_refuses_a_rebuild_that_would_replace_its_history(tmp_path: Path) -> None:
    mirror = Mirror(tmp_path, history=True)
    mirror.apply([(TABLE, "c", {"id": 1}, None, {"id": 1, "sku": "a"})])
    rows = change_rows([_row(BEGIN), (TABLE, "r", {"id": 1}, None, {"id": 1, "sku": 1})])
    staged = write_staged_file(mirror.changelog, staged_name(mirror.query_id, 1, 0), rows)
    with pytest.raises(MirrorSchemaError, match="SCD type 2"):
        plan_batch(mirror.root, mirror.changelog, [staged], mirror.query_id, 1, "a", True)
