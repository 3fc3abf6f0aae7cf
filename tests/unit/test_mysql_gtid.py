"""GTID states of the mysql connector's offsets: advanced per transaction, compared, recorded.

MariaDB's states are ``domain-server-seq`` lists and MySQL's ``uuid:interval`` sets, as their
replication documentation spells them; the failover itself is tested against a real MariaDB
replica (``tests/integration/test_mysql_failover.py``).
"""

from __future__ import annotations

import json

from spark_ckpt.sources.mysql.binlog_offset import BinlogOffset, BinlogPosition
from spark_ckpt.sources.mysql.gtid import advance, reached
from spark_ckpt.sources.mysql.transactions import (
    Begin,
    Commit,
    RowChange,
    Rows,
    Statement,
    TransactionAssembler,
)

_UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def test_a_mariadb_state_keeps_the_last_gtid_of_each_domain() -> None:
    assert advance(None, "0-1-5") == "0-1-5"
    assert advance("0-1-5,1-2-9", "0-3-6") == "0-3-6,1-2-9"
    assert advance("1-2-9", "0-1-1") == "0-1-1,1-2-9"
    assert reached("0-1-6,1-2-9", "0-1-6")
    assert reached("0-3-7", "0-1-6")
    assert not reached("0-1-5,1-2-9", "0-1-6")
    assert not reached("1-2-9", "0-1-1")
    assert not reached(None, "0-1-1")


def test_a_mysql_state_is_a_set_of_intervals_merged_as_transactions_arrive() -> None:
    assert advance(None, f"{_UUID}:1") == f"{_UUID}:1"
    assert advance(f"{_UUID}:1-5", f"{_UUID}:6") == f"{_UUID}:1-6"
    assert advance(f"{_UUID}:1-5", f"{_UUID}:8") == f"{_UUID}:1-5:8"
    assert advance(f"{_UUID}:1-5:7-9", f"{_UUID}:6") == f"{_UUID}:1-9"
    # gtid_mode=OFF: anonymous transactions have no GTID and leave the state alone.
    anonymous = "00000000-0000-0000-0000-000000000000:0"
    assert advance(f"{_UUID}:1-5", anonymous) == f"{_UUID}:1-5"
    assert reached(f"{_UUID}:1-9", f"{_UUID}:3-4")
    assert not reached(f"{_UUID}:1-5:7-9", f"{_UUID}:5-7")


def test_the_assembler_advances_the_state_by_every_commit_captured_or_not() -> None:
    """The offset's GTID state is exact: uncaptured transactions and DDL advance it too."""
    assembler = TransactionAssembler({"shop.orders": ("id",)}, gtid_state="0-1-4,1-1-2")
    change = RowChange("shop.orders", "c", None, {"id": 1})
    assembler.begin(Begin("0-1-5"))
    assert assembler.commit(Commit(BinlogPosition("b.000001", 100), 1)) is None  # uncaptured
    assert assembler.gtid_state == "0-1-5,1-1-2"
    assembler.open_gtid = "1-1-3"  # a standalone (DDL) GTID event, then its statement
    assembler.statement(Statement("CREATE TABLE x (a int)", "shop", BinlogPosition("b", 200), 1))
    assert assembler.gtid_state == "0-1-5,1-1-3"
    assembler.begin(Begin("0-1-6"))
    assembler.rows(Rows((change,)))
    txn = assembler.commit(Commit(BinlogPosition("b.000001", 300), 2))
    assert txn is not None
    assert (txn.gtid, txn.gtid_state) == ("0-1-6", "0-1-6,1-1-3")


def test_offsets_record_the_server_and_read_offsets_written_before_it() -> None:
    offset = BinlogOffset(
        3, 9, BinlogPosition("mariadb-bin.000001", 777), "0-1-9", server="mariadb:1"
    )
    value = offset.to_json()
    assert list(value) == ["v", "checkpoint", "emitted", "file", "pos", "gtid", "server"]
    assert BinlogOffset.from_json(json.loads(json.dumps(value))) == offset
    older = {k: v for k, v in value.items() if k != "server"}
    assert BinlogOffset.from_json(older).server is None
