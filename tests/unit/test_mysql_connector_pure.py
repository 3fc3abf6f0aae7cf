"""The mysql connector's pure parts: transactions, offsets, options, rows, statements.

Event objects are the assembler's own (reduced) events, in the orders MySQL's and MariaDB's
replication documentation give; the integration tests read a real MariaDB's binlog.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_ckpt.errors import InvalidOptionError, LogRewrittenError, UnsupportedChangeError
from spark_ckpt.model.options import OptionReader
from spark_ckpt.sources import change_store
from spark_ckpt.sources.mysql.binlog_offset import BinlogOffset, BinlogPosition
from spark_ckpt.sources.mysql.connector import lag_seconds
from spark_ckpt.sources.mysql.options import MySqlOptions
from spark_ckpt.sources.mysql.read_stores import ReadStores, stores_of
from spark_ckpt.sources.mysql.rows import MySqlPartition, partitions, rows
from spark_ckpt.sources.mysql.schemas import SchemaState, SchemaTracker
from spark_ckpt.sources.mysql.statements import follow_statement
from spark_ckpt.sources.mysql.stored_rows import STORE_SCHEMA
from spark_ckpt.sources.mysql.transactions import (
    Begin,
    Commit,
    RowChange,
    Rows,
    Statement,
    TransactionAssembler,
)
from spark_ckpt.state.storage import Location

_KEYS = {"shop.orders": ("id",)}


def _at(pos: int) -> BinlogPosition:
    return BinlogPosition("mariadb-bin.000002", pos)


def test_transactions_close_at_xid_or_commit_and_statements_only_move_the_position() -> None:
    assembler = TransactionAssembler(_KEYS)
    change = RowChange("shop.orders", "c", None, {"id": 1})
    # MariaDB: a GTID event opens the transaction (no BEGIN), XID closes it.
    assembler.begin(Begin("0-1-7"))
    assembler.rows(Rows((change, change)))
    assert assembler.held_changes == 2
    txn = assembler.commit(Commit(_at(500), 1_700_000_000))
    assert txn is not None
    assert (txn.gtid, txn.size, txn.end, txn.commit_ts_us) == (
        "0-1-7",
        2,
        _at(500),
        1_700_000_000_000_000,
    )
    assert assembler.held_changes == 0
    # A DDL statement outside a transaction moves the position past it.
    assembler.statement(Statement("ALTER TABLE t ADD c int", "shop", _at(600), 1))
    assert assembler.passed == _at(600)
    # A transaction of uncaptured tables only (no rows reach the assembler) yields nothing,
    # but moves the position; a non-transactional engine's COMMIT closes like XID.
    assembler.begin(Begin("0-1-9"))
    assert assembler.commit(Commit(_at(700), 2)) is None
    assert assembler.passed == _at(700)
    # Row events without a BEGIN (MySQL's BEGIN seen before a restart's start) open one.
    assembler.rows(Rows((change,)))
    closed = assembler.commit(Commit(_at(800), 3))
    assert closed is not None
    assert [(r["op"], r["key"], r["after"]) for r in closed.rows()] == [
        ("c", '{"id":1}', '{"id":1}')
    ]


def test_a_statement_inside_an_open_transaction_does_not_move_the_position() -> None:
    assembler = TransactionAssembler(_KEYS)
    assembler.begin(Begin("0-1-1"))
    assembler.statement(Statement("SAVEPOINT a", "shop", _at(300), 1))
    assert assembler.passed is None


def test_a_transaction_open_at_the_end_of_a_read_is_read_again_whole() -> None:
    """The next read starts after the last commit: what was read of an open one is dropped."""
    assembler = TransactionAssembler(_KEYS)
    change = RowChange("shop.orders", "c", None, {"id": 1})
    assembler.begin(Begin("0-1-1"))
    assembler.rows(Rows((change,)))
    assembler.discard_open()
    assembler.begin(Begin("0-1-1"))
    assembler.rows(Rows((change, change)))
    txn = assembler.commit(Commit(_at(400), 1))
    assert txn is not None
    assert txn.size == 2
    assert len(list(txn.rows())) == 2


def test_offsets_round_trip_in_a_fixed_key_order_and_refuse_another_connectors() -> None:
    offset = BinlogOffset(4, 12, BinlogPosition("mysql-bin.000010", 4242), "0-1-19")
    value = offset.to_json()
    assert list(value) == ["v", "checkpoint", "emitted", "file", "pos", "gtid"]
    assert BinlogOffset.from_json(json.loads(json.dumps(value))) == offset
    with pytest.raises(LogRewrittenError, match="mysql"):
        BinlogOffset.from_json({"v": 1, "checkpoint": 0, "emitted": 0, "lsn": "0/1"})
    assert BinlogPosition("b.000009", 900) < BinlogPosition("b.000010", 4)


def test_a_snapshot_phase_offset_has_no_position_and_round_trips() -> None:
    pending = BinlogOffset(-1, 0, None)
    value = pending.to_json()
    assert value == {"v": 1, "checkpoint": -1, "emitted": 0, "phase": "snapshot"}
    assert BinlogOffset.from_json(json.loads(json.dumps(value))) == pending
    with pytest.raises(AssertionError, match="no binlog position"):
        _ = pending.at


def _parse(**given: str) -> MySqlOptions:
    options = {"user": "cdc", "tables": "shop.orders"} | given
    return MySqlOptions.parse(OptionReader(options, "txn-cdc", [*MySqlOptions.NAMES, "gate"]))


def test_options_default_from_their_declarations_and_never_show_the_password() -> None:
    parsed = _parse(password="s3cret-value")
    assert (parsed.host, parsed.port, parsed.snapshot) == ("localhost", 3306, "initial")
    assert "s3cret-value" not in repr(parsed)
    with pytest.raises(InvalidOptionError, match=r"database\.table"):
        _parse(tables="orders")
    with pytest.raises(InvalidOptionError, match="gate"):
        _parse(gate="off")


def test_rows_are_numbered_keyed_and_carry_both_images() -> None:
    update = RowChange("shop.orders", "u", {"id": 3, "v": "a"}, {"id": 200, "v": "a"})
    delete = RowChange("shop.orders", "d", {"id": 5, "v": "b"}, None)
    assembler = TransactionAssembler(_KEYS)
    assembler.begin(Begin("0-1-5"))
    assembler.rows(Rows((update, delete)))
    txn = assembler.commit(Commit(_at(900), 10))
    assert txn is not None
    (partition,) = partitions("mysql:h:3306", [txn], 7, 100)
    assert isinstance(partition, MySqlPartition)
    (batch,) = list(rows(partition, column_types=True))
    rows_ = pa.Table.from_batches([batch]).to_pylist()
    assert [r["txn_order"] for r in rows_] == [7, 7]
    assert [r["event_index"] for r in rows_] == [0, 1]
    assert [r["key"] for r in rows_] == ['{"id":200}', '{"id":5}']
    assert json.loads(rows_[0]["before"]) == {"id": 3, "v": "a"}
    assert rows_[1]["after"] is None
    assert {r["txn_id"] for r in rows_} == {"0-1-5"}
    assert rows_[0]["column_types"] is None
    assert rows_[0]["commit_ts"] == datetime(1970, 1, 1, 0, 0, 10, tzinfo=timezone.utc)


def test_an_alter_table_is_followed_and_other_statements_on_captured_tables_stop_it() -> None:
    tables = _parse(tables="shop.orders").tables
    tracker = SchemaTracker(SchemaState())
    for harmless in (
        Statement("ALTER TABLE orders_archive ADD c int", "shop", _at(1), 1),
        Statement("ALTER TABLE orders ADD c int", "other", _at(1), 1),
        Statement("CREATE DATABASE reports", "", _at(1), 1),
        Statement(
            "ALTER TABLE items ADD FOREIGN KEY (o) REFERENCES orders (id)", "shop", _at(1), 1
        ),
        Statement("ALTER TABLE `orders` ADD c int", "shop", _at(1), 1),
        Statement("alter table shop.orders rename column c to d", "", _at(1), 1),
    ):
        follow_statement(harmless, tables, tracker)
    assert tracker.state.renames == {"shop.orders": (("c", "d"),)}
    for changing in (
        Statement("ALTER TABLE shop.orders RENAME TO shop.old", "", _at(1), 1),
        Statement("TRUNCATE TABLE Orders", "shop", _at(1), 1),
        Statement("DROP TABLE orders", "shop", _at(1), 1),
        Statement("RENAME TABLE shop.orders TO shop.old", "mysql", _at(1), 1),
    ):
        with pytest.raises(UnsupportedChangeError, match=r"shop\.orders"):
            follow_statement(changing, tables, tracker)


def test_lag_is_the_age_of_the_oldest_transaction_not_yet_delivered() -> None:
    assembler = TransactionAssembler(_KEYS)
    pending = []
    for second in (100, 130):
        assembler.rows(Rows((RowChange("shop.orders", "c", None, {"id": second}),)))
        txn = assembler.commit(Commit(_at(second), second))
        assert txn is not None
        pending.append(txn)
    assert lag_seconds(pending, 160.5) == 60.5
    assert lag_seconds([], 160.5) == 0.0


def test_a_transaction_beyond_the_buffer_and_a_partition_is_spilled_split_and_read_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Changes go to the store as read: past its memory limit to spill files, read back whole.

    A 7-change transaction with chunks of 3 and a 1-byte buffer: every chunk is a file, the
    transaction is cut over two partitions of at most 4 changes, and its rows keep their
    transaction's fields with event indexes counting through the whole transaction.
    """
    monkeypatch.setattr(change_store, "CHUNK_CHANGES", 3)
    spill = tmp_path / "stream"
    store = change_store.ChangeStore(STORE_SCHEMA, Location(str(spill)), 1)
    assembler = TransactionAssembler(_KEYS, store)
    txns = []
    for gtid, size in (("0-1-1", 7), ("0-1-2", 1), ("0-1-3", 2)):
        assembler.begin(Begin(gtid))
        for _ in range(size):
            assembler.rows(Rows((RowChange("shop.orders", "c", None, {"id": store.size}),)))
        assert assembler.held_changes == size
        txn = assembler.commit(Commit(_at(100 + store.size), 5))
        assert txn is not None
        txns.append(txn)
    assert [t.size for t in txns] == [7, 1, 2]
    parts = partitions("mysql:h:3306", txns, 10, 4)
    assert [c.count for c in store.chunks] == [3, 3, 3, 1]
    assert all(c.data is None for c in store.chunks), "over the 1-byte limit: all spilled"
    assert len(list(spill.iterdir())) == 4
    assert all(isinstance(p, MySqlPartition) and p.changes <= 4 for p in parts)
    read = [
        (r["txn_id"], r["txn_order"], r["txn_size"], r["event_index"], json.loads(r["key"])["id"])
        for part in parts
        for batch in rows(part, column_types=False)  # type: ignore[arg-type]
        for r in batch.to_pylist()
    ]
    assert read == [
        *(("0-1-1", 10, 7, i, i) for i in range(7)),
        ("0-1-2", 11, 1, 0, 7),
        ("0-1-3", 12, 2, 0, 8),
        ("0-1-3", 12, 2, 1, 9),
    ]
    assert [r["key"] for r in txns[2].rows()] == ['{"id":8}', '{"id":9}']
    store.discard()
    assert not list(spill.iterdir())


def test_a_primary_key_update_stores_the_old_key_for_windows_and_executors_drop_it() -> None:
    assembler = TransactionAssembler(_KEYS)
    assembler.rows(Rows((RowChange("shop.orders", "u", {"id": 1, "v": 1}, {"id": 2, "v": 1}),)))
    assembler.rows(Rows((RowChange("shop.orders", "u", {"id": 3, "v": 1}, {"id": 3, "v": 2}),)))
    txn = assembler.commit(Commit(_at(10), 1))
    assert txn is not None
    assert [(r["key"], r["old_key"]) for r in txn.rows()] == [
        ('{"id":2}', '{"id":1}'),
        ('{"id":3}', None),
    ]
    (partition,) = partitions("mysql:h:3306", [txn], 0, 10)
    (batch,) = rows(partition, column_types=True)  # type: ignore[arg-type]
    assert "old_key" not in batch.schema.names


def test_a_reads_store_goes_only_once_no_planned_batch_or_untaken_transaction_reads_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Spark plans batch N + 1 before it commits N: a store N + 1 reads outlives N's commit."""
    monkeypatch.setattr(change_store, "CHUNK_CHANGES", 2)
    spill = tmp_path / "stream"
    stores = ReadStores(Location(str(spill)), 1)  # every chunk spills
    (spill / "left-by-a-killed-run.arrow").parent.mkdir(parents=True)
    (spill / "left-by-a-killed-run.arrow").write_bytes(b"x")

    def read(count: int) -> list[Any]:
        """One read into a store of its own: ``count`` one-change transactions."""
        assembler = TransactionAssembler(_KEYS, stores.new())
        found = []
        for _ in range(count):
            assembler.rows(Rows((RowChange("shop.orders", "c", None, {"id": 1}),)))
            txn = assembler.commit(Commit(_at(1), 1))
            assert txn is not None
            found.append(txn)
        assembler.store.seal()
        stores.retire(assembler.store)
        return found

    first = read(4)
    assert not (spill / "left-by-a-killed-run.arrow").exists(), "a killed run's leftovers go"
    stores.planned(1, first[:2])  # batch 1 takes two; two wait for a later batch
    second = read(2)
    stores.planned(2, [*first[2:], second[0]])  # planned before batch 1 commits
    assert stores.committed(1, stores_of([second[1]])) == [], "batch 2 reads both stores"
    assert stores.committed(2, stores_of([second[1]])) == [first[0].store]
    assert stores.committed(3, []) == [second[0].store]
    assert not list(spill.iterdir())


def test_the_stores_of_reads_share_one_memory_bound(tmp_path: Path) -> None:
    stores = ReadStores(Location(str(tmp_path / "stream")), 10_000)
    first = stores.new()
    assembler = TransactionAssembler(_KEYS, first)
    for i in range(50):
        assembler.rows(Rows((RowChange("shop.orders", "c", None, {"id": i}),)))
    first.seal()
    assert 0 < first.inline_bytes < 10_000
    assert stores.new().memory_limit == 10_000 - first.inline_bytes
    stores.discard_all()
