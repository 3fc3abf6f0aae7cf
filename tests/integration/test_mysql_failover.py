"""The ``mysql`` connector resumes on a replica of the same GTID history after a failover.

Two real MariaDB servers (Debian's 10.11): a primary and a GTID replica of it
(``MASTER_USE_GTID=slave_pos``, ``log_slave_updates``, strict mode), whose binlog holds the
primary's transactions under the same GTIDs but in files and at positions of its own (its binlog
is rotated once before it replicates, so no file of the primary's lines up with one of its own).
The connector, driven as Spark's reader drives it (plan, batch at a transaction boundary, read
the partitions), streams from the primary; more transactions commit there and reach the replica;
the primary stops; a connector on the replica resumes from the last offset: every transaction
after it arrives exactly once, none before it again, and reading goes on by the replica's own
positions. An offset whose GTID state the replica does not have is a data-loss error.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from harness.servers.mariadb import MariaDbServer
from spark_ckpt.errors import DataLossError
from spark_ckpt.model.options import OptionReader
from spark_ckpt.sources.gate import Cut
from spark_ckpt.sources.mysql.binlog_offset import BinlogOffset
from spark_ckpt.sources.mysql.connector import MySqlConnector
from spark_ckpt.sources.mysql.options import MySqlOptions
from spark_ckpt.sources.mysql.server import check_server

pytestmark = pytest.mark.integration

_DB = "shop"


@pytest.fixture
def primary_and_replica() -> Iterator[tuple[MariaDbServer, MariaDbServer]]:
    """A primary (server_id 11) and its GTID replica (server_id 12), stopped and removed after."""
    servers = [
        MariaDbServer(tempfile.mkdtemp(prefix="spark-ckpt-mariadb-"), server_id=11),
        MariaDbServer(tempfile.mkdtemp(prefix="spark-ckpt-mariadb-"), server_id=12),
    ]
    try:
        primary, replica = (server.start() for server in servers)
        replica.execute("FLUSH BINARY LOGS", admin=True)
        replica.replicate_from(primary)
        yield primary, replica
    finally:
        for server in servers:
            server.stop()
            shutil.rmtree(server.workdir, ignore_errors=True)


def _connector(server: MariaDbServer) -> MySqlConnector:
    """The connector on ``server`` as a query's start builds it (driver)."""
    given = {
        "host": server.host,
        "port": str(server.port),
        "user": server.user,
        "password": server.password,
        "serverId": "7201",
        "tables": f"{_DB}.orders",
        "snapshot": "never",
    }
    options = MySqlOptions.parse(OptionReader(given, "txn-cdc", [*MySqlOptions.NAMES, "gate"]))
    info, keys = check_server(options)
    return MySqlConnector(options, info, keys, 100, False)


def _next_batch(
    connector: MySqlConnector, start: dict[str, Any]
) -> tuple[dict[str, Any], list[list[int]]]:
    """Plan from ``start`` and take every complete transaction.

    Returns the end offset, and each transaction's inserted ids (``after`` images), in order.
    """
    plan = connector.plan(start, None)
    sizes = plan.unit_sizes
    assert sizes, f"no transaction after {start}"
    cut = Cut(len(sizes) - 1, sizes[-1], sum(sizes), True)
    planned = connector.batch(cut, int(start["checkpoint"]) + 1)
    txns: dict[str, list[int]] = {}
    for partition in planned.partitions:
        for batch in connector.read(partition):
            for row in batch.to_pylist():
                txns.setdefault(row["txn_id"], []).append(json.loads(row["after"])["id"])
    return planned.end, list(txns.values())


def _commit(server: MariaDbServer, *transactions: list[str]) -> None:
    with server.connect(_DB) as conn, conn.cursor() as cursor:
        for statements in transactions:
            conn.begin()
            for sql in statements:
                cursor.execute(sql)
            conn.commit()


def test_a_failover_to_a_gtid_replica_resumes_without_loss_or_repeat(
    primary_and_replica: tuple[MariaDbServer, MariaDbServer],
) -> None:
    primary, replica = primary_and_replica
    primary.create_database(_DB)
    primary.execute("CREATE TABLE orders (id int PRIMARY KEY, note varchar(20))", _DB)
    primary.execute("CREATE TABLE other (id int PRIMARY KEY)", _DB)
    on_primary = _connector(primary)
    start = on_primary.initial_offset()
    _commit(
        primary,
        ["INSERT INTO orders VALUES (1, 'a')", "INSERT INTO orders VALUES (2, 'a')"],
        ["INSERT INTO other VALUES (1)"],  # not captured: still advances the GTID state
        ["INSERT INTO orders VALUES (3, 'b')"],
    )
    offset, seen = _next_batch(on_primary, start)
    assert seen == [[1, 2], [3]]
    # After the offset: an uncaptured DDL and transaction among captured ones, then failover.
    _commit(primary, ["INSERT INTO orders VALUES (4, 'c')"], ["INSERT INTO other VALUES (2)"])
    primary.execute("CREATE TABLE more (id int PRIMARY KEY)", _DB)
    _commit(primary, ["INSERT INTO orders VALUES (5, 'd')", "INSERT INTO orders VALUES (6, 'd')"])
    replica.wait_replicated(primary.query("SELECT @@gtid_binlog_pos")[0][0])
    primary.stop()

    on_replica = _connector(replica)
    on_replica.resume(offset)
    resumed, seen = _next_batch(on_replica, offset)
    assert seen == [[4], [5, 6]], "every transaction after the offset once, none before it"
    after = BinlogOffset.from_json(resumed)
    assert after.server == "mariadb:12"
    status = replica.query("SHOW MASTER STATUS")[0]
    assert (after.at.file, after.at.pos) == (status[0], int(status[1])), "the replica's position"
    assert after.gtid == replica.query("SELECT @@gtid_binlog_pos")[0][0]

    # The replica is the primary now: reading goes on from its own position.
    replica.execute("STOP SLAVE", admin=True)
    _commit(replica, ["INSERT INTO orders VALUES (7, 'e')"])
    _, seen = _next_batch(on_replica, resumed)
    assert seen == [[7]]

    # An offset whose GTID state the replica never had (another history, or a binlog purged
    # past it) is a data-loss error, never a silent start elsewhere.
    alien = resumed | {"gtid": "0-11-999", "server": "mariadb:11"}
    fresh = _connector(replica)
    fresh.resume(alien)
    with pytest.raises(DataLossError, match="GTID 0-11-999") as lost:
        fresh.plan(alien, None)
    assert replica.password not in str(lost.value)
