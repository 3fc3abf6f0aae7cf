"""The mysql connector's schema tracking: table maps compared, renames from the DDL, ids kept.

Table maps are described as :class:`~spark_ckpt.sources.mysql.types.MySqlColumn` tuples (what the
binlog client's table map gives, see ``test_mysql_types.py`` for real ones); the integration test
follows a real MariaDB's migrations into a mirror.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_ckpt.errors import StateFormatError
from spark_ckpt.sources.mysql.binlog_offset import BinlogOffset, BinlogPosition
from spark_ckpt.sources.mysql.schemas import SchemaState, SchemaTracker, source_type
from spark_ckpt.sources.mysql.types import FieldType, MySqlColumn

T = "shop.products"
ID = MySqlColumn("id", FieldType.LONG, primary=True)
NAME = MySqlColumn("name", FieldType.BLOB, charset="utf8mb4")
QTY = MySqlColumn("qty", FieldType.LONG)
PRICE = MySqlColumn("price", FieldType.NEWDECIMAL, precision=10, scale=2)


def _changes(tracker: SchemaTracker, *columns: MySqlColumn) -> list[str]:
    event = tracker.observe(T, columns)
    return [] if event is None else [c.describe() for c in event.changes]


def test_a_table_map_that_differs_is_a_schema_change_and_the_first_one_is_none() -> None:
    tracker = SchemaTracker(SchemaState())
    assert _changes(tracker, ID, NAME, QTY) == []  # first seen: taken as it is
    assert _changes(tracker, ID, NAME, QTY) == []
    assert _changes(tracker, ID, NAME, QTY, PRICE) == ["column_added price (- -> decimal(10,2))"]
    assert _changes(tracker, ID, QTY, PRICE) == ["column_dropped name (string -> -)"]
    wider = MySqlColumn("qty", FieldType.LONGLONG)
    assert _changes(tracker, ID, wider, PRICE) == ["column_type_changed qty (int -> bigint)"]
    ids = [c.id for c in tracker.state.tables[T].columns]
    assert ids == [1, 3, 4], "a column keeps its id; a new one takes the next"


def test_a_rename_in_the_ddl_keeps_the_columns_id_until_its_table_map_shows_it() -> None:
    tracker = SchemaTracker(SchemaState())
    tracker.observe(T, (ID, NAME, QTY))
    tracker.statement(T, "ALTER TABLE products RENAME COLUMN name TO title")
    assert tracker.state.renames == {T: (("name", "title"),)}
    title = MySqlColumn("title", FieldType.BLOB, charset="utf8mb4")
    assert _changes(tracker, ID, title, QTY) == ["column_renamed name -> title"]
    assert tracker.state.renames == {}
    tracker.statement(T, "ALTER TABLE products CHANGE qty amount bigint")
    amount = MySqlColumn("amount", FieldType.LONGLONG)
    assert _changes(tracker, ID, title, amount) == [
        "column_renamed qty -> amount",
        "column_type_changed amount (int -> bigint)",
    ]
    assert [c.id for c in tracker.state.tables[T].columns] == [1, 2, 3]


def test_an_added_columns_existing_rows_read_its_default_or_are_marked_unknown() -> None:
    asked: list[tuple[str, str]] = []

    def defaults(table: str, column: str) -> tuple[bool, Any]:
        asked.append((table, column))
        return (True, 7) if column == "qty" else (False, None)

    tracker = SchemaTracker(SchemaState(), defaults)
    tracker.observe(T, (ID, NAME))
    event = tracker.observe(T, (ID, NAME, QTY, PRICE))
    assert event is not None
    added = {c.name: c for c in event.added()}
    assert (added["qty"].default, added["qty"].default_unknown) == (7, False)
    assert added["price"].default_unknown
    assert asked == [(T, "qty"), (T, "price")]
    # The state keeps the schema without what only the adding event says.
    assert all(c.default is None and not c.default_unknown for c in tracker.state.tables[T].columns)


def test_an_open_transactions_table_maps_are_forgotten_when_it_is_read_again() -> None:
    tracker = SchemaTracker(SchemaState())
    tracker.observe(T, (ID, NAME))
    tracker.commit()
    assert tracker.observe(T, (ID, NAME, QTY)) is not None  # inside a transaction still open
    tracker.rollback()
    assert _changes(tracker, ID, NAME, QTY) == ["column_added qty (- -> int)"], "shown again"


def test_the_state_round_trips_through_the_offset() -> None:
    tracker = SchemaTracker(SchemaState())
    tracker.observe(T, (ID, NAME))
    tracker.statement(T, "ALTER TABLE products RENAME COLUMN name TO title")
    offset = BinlogOffset(3, 9, BinlogPosition("mariadb-bin.000002", 500), "0-1-4", tracker.state)
    parsed = BinlogOffset.from_json(json.loads(json.dumps(offset.to_json())))
    assert parsed == offset
    assert "schemas" not in BinlogOffset(3, 9, BinlogPosition("b.000001", 4)).to_json()
    with pytest.raises(StateFormatError, match="schema state"):
        SchemaState.from_json({"renames": {}})


@pytest.mark.parametrize(
    ("column", "spelled"),
    [
        (MySqlColumn("a", FieldType.LONGLONG, unsigned=True), "bigint unsigned"),
        (MySqlColumn("a", FieldType.NEWDECIMAL, precision=12, scale=4), "decimal(12,4)"),
        (MySqlColumn("a", FieldType.DATETIME2, fsp=6), "datetime(6)"),
        (MySqlColumn("a", FieldType.VARCHAR, charset="binary"), "varbinary"),
        (MySqlColumn("a", FieldType.BLOB, charset="utf8mb4"), "text"),
        (MySqlColumn("a", FieldType.SET, members=("a", "b")), "set('a','b')"),
        (MySqlColumn("a", FieldType.BIT, bits=10), "bit(10)"),
        (MySqlColumn("a", 200), "type 200"),
    ],
)
def test_source_types_are_spelled_as_far_as_a_table_map_tells(
    column: MySqlColumn, spelled: str
) -> None:
    assert source_type(column) == spelled
