"""Schema changes found in PostgreSQL's real logical decoding output, replayed step by step.

The fixture (``bench/capture_schema_fixture.py``) holds what a PostgreSQL 15 server sent on a
pgoutput and a wal2json slot after each migration step, and the catalog as the connector
described it right then. Both plugins must find the same changes: a rename told from a drop and
an add by ``attnum``, the default existing rows read, a default known after a table rewrite only
when it calls immutable functions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_ckpt.model.schema_changes import SCHEMA_CHANGE_OP, SchemaEvent, TableSchema
from spark_ckpt.sources.postgres.decoding.pgoutput import decode_transactions as decode_pgoutput
from spark_ckpt.sources.postgres.decoding.pgoutput import render_change
from spark_ckpt.sources.postgres.decoding.relations import RelationCatalog
from spark_ckpt.sources.postgres.decoding.wal2json import Wal2JsonWatcher
from spark_ckpt.sources.postgres.decoding.wal2json import decode_transactions as decode_wal2json
from spark_ckpt.sources.postgres.decoding.wal2json_columns import decode_changes
from spark_ckpt.sources.postgres.schema_tracking import (
    CatalogColumns,
    SchemaTracker,
    catalog_schema,
    drifted,
)

FIXTURE = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "postgres" / "schema-changes-15.json").read_text()
)
TABLE = "public.products"
TABLES = frozenset({TABLE})
EXPECTED = [
    ["column_added note (- -> string)"],
    ["column_added flag (- -> boolean)"],
    ["column_renamed name -> title"],
    ["column_dropped price (decimal(10,2) -> -)"],
    ["column_dropped note (string -> -)", "column_added note (- -> int)"],
    ["column_type_changed qty (integer -> bigint)"],
    [
        "column_type_changed sku (character varying(10) -> character varying(40))",
        "column_type_changed amount (numeric(8,2) -> numeric(14,2))",
    ],
    ["column_type_changed qty (bigint -> numeric(20,0))", "column_added code (- -> string)"],
    ["column_added r (- -> double)"],
    ["column_type_changed sku (character varying(40) -> integer)"],
]


def _catalog(value: dict[str, Any]) -> CatalogColumns:
    return CatalogColumns(
        tuple(
            (int(n), str(a), str(t), bool(nn), m, bool(d)) for n, a, t, nn, m, d in value["columns"]
        ),
        tuple(value["key"]),
        str(value["storage"]),
        {int(k): v for k, v in value["rewrite_defaults"].items()},
        str(value["version"]),
    )


def _pgoutput_events(
    step: dict[str, Any], state: dict[str, TableSchema]
) -> tuple[list[SchemaEvent], dict[str, TableSchema]]:
    tracker = SchemaTracker(state, lambda table: _catalog(step["catalog"]))
    catalog = RelationCatalog(
        lambda oid, typmod: FIXTURE["types"][f"{oid},{typmod}"],
        lambda table: tracker.state[table].key,
    )
    rows = [(lsn, xid, bytes.fromhex(data)) for lsn, xid, data in step["pgoutput"]]
    events, summaries = [], []
    for txn in decode_pgoutput(rows, catalog, TABLES, None, 0, tracker):
        summaries += txn.schema_changes
        for data, index in zip(txn.changes, txn.relations, strict=True):
            table, op, _, before, after = render_change(data, catalog.versions[index])
            if op == SCHEMA_CHANGE_OP:
                events.append(SchemaEvent.from_row(table, before, after))
    assert summaries == [e.summary() for e in events]  # what progress events report
    return events, dict(tracker.state)


def _wal2json_events(
    step: dict[str, Any], state: dict[str, TableSchema]
) -> tuple[list[SchemaEvent], dict[str, TableSchema]]:
    tracker = SchemaTracker(state, lambda table: _catalog(step["catalog"]))
    listed = tuple((name, kind) for _, name, kind, _, _, _ in step["catalog"]["columns"])
    now = {TABLE: (listed, str(step["catalog"]["version"]))}
    watcher = Wal2JsonWatcher(tracker, drifted(state, now))
    assert watcher.watch == TABLES, "the catalog check did not see the step's DDL"
    rows = [tuple(row) for row in step["wal2json"]]
    txns = list(decode_wal2json(rows, TABLES, None, 0, watcher))
    changes = [c for txn in txns for c in txn.changes]
    decoded = decode_changes(pa.array(changes, pa.string()))
    events = [
        SchemaEvent.from_row(table, before, after)
        for table, op, before, after in zip(
            decoded.table.to_pylist(),
            decoded.op.to_pylist(),
            decoded.before.to_pylist(),
            decoded.after.to_pylist(),
            strict=True,
        )
        if op == SCHEMA_CHANGE_OP
    ]
    assert [s for t in txns for s in t.schema_changes] == [e.summary() for e in events]
    return events, dict(tracker.state)


@pytest.mark.parametrize(
    "events_of", [_pgoutput_events, _wal2json_events], ids=["pgoutput", "wal2json"]
)
def test_each_step_of_a_real_migration_is_found_with_what_existing_rows_read(
    events_of: Any,
) -> None:
    state = {TABLE: catalog_schema(_catalog(FIXTURE["initial_catalog"]))}
    found = []
    for step in FIXTURE["steps"]:
        events, state = events_of(step, state)
        assert len(events) <= 1, step["step"]
        found.append([c.describe() for e in events for c in e.changes])
        if step["step"] == "add a column with a default":
            assert [c.default for c in events[0].added()] == [True]
        if step["step"].startswith("add a column with a default, rewritten"):
            assert [c.default for c in events[0].added()] == ["c0"]
        if step["step"] == "add a column with a volatile default":
            assert [c.default_unknown for c in events[0].added()] == [True]
        if step["step"] == "rename a column":
            assert events[0].column_mapping()["name"] == "title"
    assert found == EXPECTED


def test_a_column_added_and_dropped_between_reads_still_drifts() -> None:
    """Same columns again, another definition version: wal2json's changes must be watched."""
    known = catalog_schema(_catalog(FIXTURE["initial_catalog"]))
    columns = tuple((c.name, c.source_type) for c in known.columns)
    assert drifted({TABLE: known}, {TABLE: (columns, str(known.version))}) == frozenset()
    assert drifted({TABLE: known}, {TABLE: (columns, "another")}) == TABLES


def test_a_re_sent_relation_is_no_change() -> None:
    """Pgoutput describes every relation again in each decoding call: no event for that."""
    state = {TABLE: catalog_schema(_catalog(FIXTURE["initial_catalog"]))}
    step = FIXTURE["steps"][0]
    _, state = _pgoutput_events(step, state)
    again, _ = _pgoutput_events(step, state)
    assert again == []


def test_a_catalog_already_past_the_stream_still_tells_what_changed_here() -> None:
    """Two DDLs between reads: the stream's first relation is resolved with the later catalog.

    Here ``name`` was renamed to ``title`` (what the relation shows), and later ``title`` to
    ``label``, ``price`` dropped and ``note`` added (what the catalog shows by now).
    """

    def column(attnum: int, name: str, kind: str) -> tuple[int, str, str, bool, None, bool]:
        return (attnum, name, kind, attnum == 1, None, False)

    first = (column(1, "id", "integer"), column(2, "name", "text"))
    known = catalog_schema(
        CatalogColumns((*first, column(3, "price", "numeric(10,2)")), ("id",), "100")
    )
    later = CatalogColumns(
        (column(1, "id", "integer"), column(2, "label", "text"), column(4, "note", "text")),
        ("id",),
        "100",
    )
    tracker = SchemaTracker({TABLE: known}, lambda table: later)
    columns = (("id", "integer"), ("title", "text"), ("price", "numeric(10,2)"))
    event = tracker.observe(TABLE, columns, ("id",))
    assert event is not None
    assert [c.describe() for c in event.changes] == ["column_renamed name -> title"]
    assert [c.id for c in event.after.columns] == [1, 2, 3]
