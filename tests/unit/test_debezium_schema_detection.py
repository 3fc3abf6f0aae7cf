"""Schema changes in Debezium change logs, found from the records' Kafka Connect schemas.

Read from logs Debezium itself wrote (``tests/fixtures/debezium``): PostgreSQL through a
migration sequence (``schema-changes-postgres-3.6.1``, its ``STEPS.txt`` lists the statements),
MariaDB through the same where it can run it and a table created while streaming
(``schema-changes-mariadb-3.5.0``), and MariaDB adding a column with a default (``mariadb-3.5.0``,
step D1).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_debezium_connectors import FIXTURES, read_all

from spark_ckpt.model.schema_changes import SchemaEvent
from spark_ckpt.sources.debezium.connector import DebeziumJsonConnector
from spark_ckpt.sources.debezium_format.envelope_schemas import (
    PlannedSchemas,
    SchemaFollower,
    SchemaRow,
    follow_units,
    with_schema_rows,
)
from spark_ckpt.sources.gate import Cut
from spark_ckpt.sources.schema import ARROW_SCHEMA
from spark_ckpt.state.storage import Location

POSTGRES = FIXTURES / "schema-changes-postgres-3.6.1"
MARIADB = FIXTURES / "schema-changes-mariadb-3.5.0"


def schema_events(rows: list[dict[str, Any]]) -> list[SchemaEvent]:
    return [
        SchemaEvent.from_row(r["table"], r["before"], r["after"]) for r in rows if r["op"] == "s"
    ]


def kinds(event: SchemaEvent) -> list[tuple[str, str | None]]:
    return [(c.kind, c.column) for c in event.changes]


def test_each_migration_step_debezium_wrote_is_one_schema_change_row() -> None:
    rows, _ = read_all(POSTGRES, column_types=True)
    events = schema_events(rows)
    assert [kinds(e) for e in events] == [
        [("column_added", "note")],
        [("column_added", "flag")],
        [("column_dropped", "price")],
        [("column_dropped", "note")],  # dropped, a write, added again: two changes
        [("column_added", "note")],
        [
            ("column_type_changed", "qty"),
            ("column_type_changed", "sku"),
            ("column_type_changed", "amount"),
        ],
        [("column_added", "code")],
        [("column_dropped", "name"), ("column_added", "title")],
    ]
    flag = events[1].after.column("flag")
    assert flag is not None
    assert flag.default is True
    assert not flag.nullable
    widened = events[5]
    assert widened.before is not None
    for name, old, new in [("qty", "int", "bigint"), ("amount", "decimal(8,2)", "decimal(14,2)")]:
        before, after = widened.before.column(name), widened.after.column(name)
        assert before is not None
        assert after is not None
        assert (before.type, after.type) == (old, new)
    sku = widened.after.column("sku")
    assert sku is not None
    assert (sku.type, sku.source_type) == ("string", "VARCHAR(40)")
    # No column ids in a Connect schema: the rename cannot be told from a drop and an add.
    assert events[-1].ambiguous() == ("name",)
    assert events[2].ambiguous() == ()


def test_a_schema_row_sits_before_the_first_change_under_its_schema() -> None:
    """Rows of each transaction are numbered 0..txn_size-1 with the schema rows counted."""
    rows, _ = read_all(POSTGRES, column_types=True)
    by_order: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_order[row["txn_order"]].append(row)
    for order, txn in by_order.items():
        assert sorted(r["event_index"] for r in txn) == list(range(len(txn))), order
        assert {r["txn_size"] for r in txn} == {len(txn)}, order
    columns: dict[str, set[str]] = {}
    for row in sorted(rows, key=lambda r: (r["txn_order"], r["event_index"])):
        if row["op"] == "s":
            schema = json.loads(row["after"])
            columns[row["table"]] = {column["name"] for column in schema["columns"]}
        elif row["after"] is not None and row["table"] in columns:
            assert set(json.loads(row["after"])) <= columns[row["table"]], row
            types = json.loads(row["column_types"])
            assert set(types) == columns[row["table"]], row


def test_mariadb_adding_a_column_with_a_default_says_what_existing_rows_read() -> None:
    rows, _ = read_all(FIXTURES / "mariadb-3.5.0", column_types=True)
    (event,) = schema_events(rows)
    assert event.table == "shop.items"
    assert kinds(event) == [("column_added", "qty")]
    added = event.after.column("qty")
    assert added is not None
    assert (added.type, added.default, added.nullable) == ("int", 1, True)
    row = next(r for r in rows if r["op"] == "s")
    nxt = next(
        r
        for r in rows
        if (r["txn_order"], r["event_index"]) == (row["txn_order"], row["event_index"] + 1)
    )
    assert nxt["table"] == "shop.items"
    assert "qty" in json.loads(nxt["after"])


def test_mariadb_migrations_and_a_new_table() -> None:
    rows, _ = read_all(MARIADB, column_types=True)
    events = schema_events(rows)
    assert [kinds(e) for e in events][:3] == [
        [("column_added", "note")],
        [("column_added", "flag")],
        [("column_dropped", "price")],
    ]
    flag = events[1].after.column("flag")
    assert flag is not None
    assert (flag.type, flag.source_type, flag.default, flag.nullable) == (
        "smallint",
        "TINYINT",
        1,
        False,
    )
    # The DDL events Debezium wrote before the changes tell the renames from drops and adds.
    renames = [e for e in events if "column_renamed" in {c.kind for c in e.changes}]
    assert [kinds(e) for e in renames] == [
        [("column_renamed", "title")],
        [("column_renamed", "code")],
    ]
    assert renames[0].column_mapping()["name"] == "title"
    assert renames[1].ambiguous() == ()
    created = events[-1]
    assert created.table.endswith(".extra")
    assert kinds(created) == [("table_created", None)]
    # A new table has no existing rows: nothing about them is unknown.
    assert not any(c.default_unknown for c in created.after.columns)


def test_without_column_types_no_schema_rows_are_made() -> None:
    rows, _ = read_all(POSTGRES)
    assert not [r for r in rows if r["op"] == "s"]


def _batches(
    connector: DebeziumJsonConnector, start: dict[str, Any], units: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    plan = connector.plan(start, None)
    sizes = plan.unit_sizes[:units]
    batch = connector.batch(Cut(len(sizes) - 1, sizes[-1], sum(sizes), True), 0)
    rows = [r for p in batch.partitions for rb in connector.read(p) for r in rb.to_pylist()]
    return rows, batch.end


@pytest.mark.parametrize("log", [POSTGRES, MARIADB], ids=["postgres", "mariadb"])
def test_a_restart_between_batches_repeats_no_schema_change_and_misses_none(log: Path) -> None:
    """Batches of three units, each planned by a fresh connector from the last offset."""
    whole, _ = read_all(log, column_types=True)
    offset = DebeziumJsonConnector(Location(str(log))).initial_offset()
    rows: list[dict[str, Any]] = []
    reported: list[str] = []
    while len(rows) < len(whole):
        connector = DebeziumJsonConnector(Location(str(log)), column_types=True)
        connector.resume(offset)
        got, offset = _batches(connector, offset, 3)
        assert got, "no progress"
        rows += got
        status = connector.status()
        assert status is not None
        reported += status["schemaChanges"] or []
    assert [(r["txn_order"], r["event_index"], r["op"]) for r in rows] == [
        (r["txn_order"], r["event_index"], r["op"]) for r in whole
    ]
    assert len(offset["schemas"]) >= 2
    # The status names each batch's schema changes, once each.
    assert [line.split(": ", 1)[1] for line in reported][:2] == [
        "column_added note (- -> string)",
        "column_added flag (- -> " + ("boolean)" if log == POSTGRES else "smallint)"),
    ]
    assert len(reported) == len(schema_events(whole))


def test_schema_rows_are_placed_and_events_renumbered_around_them() -> None:
    """Events 0..4 of transaction 7, schema rows before events 1 and 3."""
    base = {name: [None] * 5 for name in ARROW_SCHEMA.names}
    base |= {
        "txn_order": [7] * 5,
        "txn_size": [5] * 5,
        "event_index": list(range(5)),
        "op": ["u"] * 5,
        "table": ["t"] * 5,
        "txn_id": ["x"] * 5,
    }
    batch = pa.RecordBatch.from_pydict(base, schema=ARROW_SCHEMA)
    rows = [SchemaRow(7, 3, "t", "{}", "{}", ""), SchemaRow(7, 1, "t", None, "{}", "")]
    out = with_schema_rows(batch, rows).to_pylist()
    assert [(r["event_index"], r["op"]) for r in out] == [
        (0, "u"), (1, "s"), (2, "u"), (3, "u"), (4, "s"), (5, "u"), (6, "u")
    ]  # fmt: skip
    assert {r["txn_size"] for r in out} == {7}
    other = with_schema_rows(batch, [SchemaRow(8, 0, "t", None, "{}", "")])
    assert other is batch


def test_a_table_first_seen_is_new_only_when_a_create_table_statement_says_so() -> None:
    """A table first seen may have been there, empty: only MySQL's CREATE TABLE tells."""
    envelope = json.dumps(
        {
            "type": "struct",
            "fields": [
                {
                    "type": "struct",
                    "field": "after",
                    "fields": [{"type": "int32", "optional": False, "field": "id"}],
                }
            ],
        }
    )
    follower = SchemaFollower(None)
    follower.begin_unit(snapshot=True)
    assert follower.follow(0, 0, "db.a", envelope, ["CREATE TABLE a (id int)"]) is None
    follower.begin_unit(snapshot=False)
    assert follower.follow(1, 0, "db.b", envelope) is None  # an empty table, seen late
    row = follower.follow(2, 0, "db.c", envelope, ["CREATE TABLE c (id int PRIMARY KEY)"])
    assert row is not None
    assert kinds(SchemaEvent.from_row(row.table, row.before, row.after)) == [
        ("table_created", None)
    ]


def test_a_change_a_kafka_snapshot_or_chunk_shows_is_placed_at_its_start() -> None:
    """Blocks' rows are not numbered in transaction order; each table is read with one query."""
    first, second = (
        json.dumps(
            {
                "type": "struct",
                "fields": [{"type": "struct", "field": "after", "fields": fields}],
            }
        )
        for fields in (
            [{"type": "int32", "optional": False, "field": "id"}],
            [
                {"type": "int32", "optional": False, "field": "id"},
                {"type": "string", "optional": True, "field": "note"},
            ],
        )
    )
    units = [
        PlannedSchemas(0, [(0, "db.t", first, [])], snapshot=True, block=True),
        PlannedSchemas(1, [(7, "db.t", second, [])], block=True),
        PlannedSchemas(2, [(3, "db.t", first, [])]),
    ]
    rows, state = follow_units(None, units)
    assert [(r.order, r.at) for r in rows] == [(1, 0), (2, 3)]
    assert [c.name for c in state["db.t"].columns] == ["id"]
