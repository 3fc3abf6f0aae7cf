"""How each Debezium connector names transactions, read from what the connectors write.

PostgreSQL and MariaDB: logs Debezium itself wrote (``tests/fixtures/debezium``, captured with
``tests/harness/peers/debezium-writer``; each folder's ``STEPS.txt`` says what the database did,
including a SIGKILL of Debezium and its restart). The connectors we cannot run here: Debezium's own
documented examples of transaction metadata, cited per case.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from spark_ckpt.errors import InvalidOptionError, RepeatedSnapshotError
from spark_ckpt.sources.debezium.connector import DebeziumJsonConnector
from spark_ckpt.sources.debezium.options import parse_key_columns
from spark_ckpt.sources.gate import Cut
from spark_ckpt.state.storage import Location

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"


def read_all(log: Path, **options: Any) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Plan everything the log holds as one batch, read it; return its rows and skip counts."""
    connector = DebeziumJsonConnector(Location(str(log)), **options)
    plan = connector.plan(connector.initial_offset(), None)
    sizes = plan.unit_sizes
    assert plan.held_back is None, plan.held_back
    batch = connector.batch(Cut(len(sizes) - 1, sizes[-1], sum(sizes), True), 0)
    rows = [
        row for part in batch.partitions for rb in connector.read(part) for row in rb.to_pylist()
    ]
    status = connector.status()
    assert status is not None
    return rows, status["skipped"]


def transactions(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["txn_id"], []).append(row)
    return out


def test_postgres_transactions_are_named_by_txid_not_by_each_records_lsn() -> None:
    """Debezium 3.6.1 (pgoutput) writes '<txId>:<lsn>' ids that differ per record of a txn."""
    rows, skipped = read_all(FIXTURES / "postgres-3.6.1")
    txns = transactions(rows)
    snapshot = txns.pop("snapshot")
    assert [r["op"] for r in snapshot] == ["r"] * 7  # orders 1-3, items of 1, 2, 3
    # T1..T8 of STEPS.txt, each whole (T4: two primary-key updates, a delete and a create each).
    assert [len(t) for t in txns.values()] == [3, 2, 2, 4, 2, 3, 3, 6]
    assert all(txn_id.isdigit() for txn_id in txns), list(txns)
    assert skipped["tombstones"] == 8
    orders = [r["txn_order"] for r in rows]
    assert orders == sorted(orders)


def test_key_columns_make_the_key_of_lines_without_one() -> None:
    """Option keyColumns: a key from the after image, or the before image of a delete."""
    keys = {"public.orders": ["id"], "public.items": ["order_id", "n"]}
    rows, _ = read_all(FIXTURES / "postgres-3.6.1", key_columns=keys)
    for row in rows:
        image = json.loads(row["before"] if row["op"] == "d" else row["after"])
        expected = {column: image[column] for column in keys[row["table"]]}
        assert json.loads(row["key"]) == expected, row
    assert list(json.loads(rows[3]["key"])) == ["order_id", "n"]  # in the order named


@pytest.mark.parametrize(
    "value",
    ["public.orders", "public.orders:", ":id", "public.orders:id,", "a:id;a:id", "a:id;b:"],
)
def test_key_columns_option_refuses_what_it_cannot_read(value: str) -> None:
    """Each malformed keyColumns is an InvalidOptionError that shows the accepted form."""
    with pytest.raises(InvalidOptionError, match=re.escape("public.orders:id;public.order")):
        parse_key_columns(value)


def test_mariadb_gtids_with_ddl_and_a_restart_inside_a_transaction() -> None:
    """Debezium 3.5.0 (MariaDB 10.11): GTID ids, BEGIN-only DDL, repeats after a SIGKILL."""
    rows, skipped = read_all(FIXTURES / "mariadb-3.5.0")
    txns = transactions(rows)
    assert len(txns.pop("snapshot")) == 7
    assert all(txn_id.startswith("0-1-") for txn_id in txns), list(txns)
    # T5 was cut by the SIGKILL after 3 of its 4 changes: Debezium wrote it again whole, and
    # the END of the transaction before it again with event_count 0.
    assert [len(t) for t in txns.values()] == [3, 2, 2, 4, 4, 3, 3, 6]
    assert skipped["repeats"] == 3
    assert skipped["schemaChanges"] >= 1  # the snapshot's DDL and the ALTER TABLE
    for txn in txns.values():
        assert [r["event_index"] for r in txn] == list(range(len(txn)))


def test_a_snapshot_taken_again_after_streaming_is_refused(tmp_path: Path) -> None:
    """Debezium with lost offsets snapshots again: refused unless resnapshot=accept."""
    source = FIXTURES / "postgres-3.6.1"
    log = tmp_path / "log"
    log.mkdir()
    for f in sorted(source.glob("*.jsonl")):
        (log / f.name).write_bytes(f.read_bytes())
    # The snapshot again, as a later file (a later position: the slot moved on).
    again = [
        line.replace('"lsn":22119848', '"lsn":22999999').replace('\\"22119848\\"', '\\"22999999\\"')
        for line in (source / "0000000001.jsonl").read_text().splitlines()
    ]
    (log / "0000000009.jsonl").write_text("\n".join(again) + "\n")
    with pytest.raises(RepeatedSnapshotError, match="initial snapshot again"):
        read_all(log)
    rows, _ = read_all(log, accept_resnapshot=True)
    assert sum(1 for r in rows if r["txn_id"] == "snapshot") == 14


def test_incremental_snapshot_chunks_are_whole_units_at_their_place_in_the_log() -> None:
    """Debezium 3.6.1 (pgoutput), an incremental snapshot of orders in chunks of 3 rows.

    Debezium writes each chunk's rows (no transaction block) right before the INSERT of the
    window's close watermark into the signal table: each chunk is one unit there.
    """
    rows, _ = read_all(FIXTURES / "incremental-postgres-3.6.1")
    txns = transactions(rows)
    chunks = [t for t in txns.values() if t[0]["op"] == "r"]
    ids = [[json.loads(r["after"])["id"] for r in chunk] for chunk in chunks]
    assert ids == [[1, 2, 3], [4, 5, 6], [8, 9]]  # 7 was deleted before its chunk was read
    assert all(r["txn_size"] == len(chunk) for chunk in chunks for r in chunk)
    order = [(t[0]["table"], t[0]["op"]) for t in txns.values()]
    # Each chunk lies between its window's open and close watermark (signal-table inserts).
    for i, (_, op) in enumerate(order):
        if op == "r":
            assert order[i - 1] == order[i + 1] == ("public.debezium_signal", "c"), order


def test_a_chunk_the_log_ends_inside_is_held_back_with_its_reason(tmp_path: Path) -> None:
    """Until the record after a chunk's last row is read, the chunk is held back, visibly."""
    source = FIXTURES / "incremental-postgres-3.6.1"
    log = tmp_path / "log"
    log.mkdir()
    # 0000000006.jsonl ends after the first row of the last chunk (orders 8).
    for f in sorted(source.glob("*.jsonl"))[:6]:
        (log / f.name).write_bytes(f.read_bytes())
    connector = DebeziumJsonConnector(Location(str(log)))
    plan = connector.plan(connector.initial_offset(), None)
    assert plan.held_back is not None
    assert "incremental snapshot" in plan.held_back.message, plan.held_back
    assert "0000000006.jsonl:7" in plan.held_back.message
    assert plan.held_changes == 1
    # A budget (maxChangesPerTrigger) that ends inside a chunk still plans the chunk whole.
    connector = DebeziumJsonConnector(Location(str(log)))
    plan = connector.plan(connector.initial_offset(), 7)
    assert plan.unit_sizes == [1, 1, 1, 1, 1, 1, 3]
    (log / "0000000007.jsonl").write_bytes((source / "0000000007.jsonl").read_bytes())
    rows, _ = read_all(log)
    assert [len(t) for t in transactions(rows).values() if t[0]["op"] == "r"] == [3, 3, 2]


# Debezium's documentation of each connector's transaction metadata shows the BEGIN, the END
# and an event's ``transaction`` block of one transaction, the same id in all three; the source
# blocks are each connector's documented ``source`` fields.
DOCUMENTED: dict[str, tuple[str, list[tuple[str, dict[str, str]]]]] = {
    # https://debezium.io/documentation/reference/stable/connectors/sqlserver.html
    # ("Transaction metadata"; source: db, schema, table)
    "sqlserver": (
        "00000025:00000d08:0025",
        [
            ("testDB.dbo.tablea", {"db": "testDB", "schema": "dbo", "table": "tablea"}),
            ("testDB.dbo.tableb", {"db": "testDB", "schema": "dbo", "table": "tableb"}),
        ],
    ),
    # https://debezium.io/documentation/reference/stable/connectors/db2.html
    "db2": (
        "00000025:00000d08:0025",
        [
            ("testDB.dbo.tablea", {"db": "testDB", "schema": "dbo", "table": "tablea"}),
            ("testDB.dbo.tableb", {"db": "testDB", "schema": "dbo", "table": "tableb"}),
        ],
    ),
    # https://debezium.io/documentation/reference/stable/connectors/oracle.html (an XID)
    "oracle": (
        "5.6.641",
        [
            ("ORCLPDB1.DEBEZIUM.A", {"db": "ORCLPDB1", "schema": "DEBEZIUM", "table": "A"}),
            ("ORCLPDB1.DEBEZIUM.B", {"db": "ORCLPDB1", "schema": "DEBEZIUM", "table": "B"}),
        ],
    ),
    # https://debezium.io/documentation/reference/stable/connectors/mysql.html (a GTID)
    "mysql": (
        "f1e5a1e3-1c0b-11ee-9b3f-0242ac120002:23",
        [
            ("inventory.a", {"db": "inventory", "table": "a"}),
            ("inventory.b", {"db": "inventory", "table": "b"}),
        ],
    ),
}


@pytest.mark.parametrize("connector", sorted(DOCUMENTED))
def test_documented_transaction_ids_name_one_transaction(connector: str, tmp_path: Path) -> None:
    """The documented example's BEGIN, two events and END assemble into one transaction."""
    txn_id, collections = DOCUMENTED[connector]
    events = [
        {
            "before": None,
            "after": {"pk": str(order), "aa": "1"},
            "source": {"connector": connector, **source},
            "op": "c",
            "ts_ms": 1580390884335,
            "transaction": {"id": txn_id, "total_order": order, "data_collection_order": 1},
        }
        for order, (_, source) in enumerate(collections, start=1)
    ]
    end = {
        "status": "END",
        "id": txn_id,
        "event_count": 2,
        "data_collections": [
            {"data_collection": name, "event_count": 1} for name, _ in collections
        ],
    }
    begin = {"status": "BEGIN", "id": txn_id, "event_count": None, "data_collections": None}
    log = tmp_path / "log"
    log.mkdir()
    lines = [begin, *events, end]
    (log / "0001.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    rows, _ = read_all(log)
    assert [(r["txn_id"], r["event_index"], r["txn_size"]) for r in rows] == [
        (txn_id, 0, 2),
        (txn_id, 1, 2),
    ]
