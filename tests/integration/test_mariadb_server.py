"""The throwaway MariaDB server is set up for CDC: a row binlog the connector's user can follow."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from harness.servers.mariadb import MariaDbServer


def test_binlog_is_configured_for_cdc(mariadb_server: MariaDbServer) -> None:
    """Row format, full images, annotated rows and strict GTIDs, as Debezium's docs ask."""
    [row] = mariadb_server.query(
        "SELECT @@binlog_format, @@binlog_row_image, @@log_bin, @@gtid_strict_mode, "
        "@@log_slave_updates, @@binlog_annotate_row_events, @@server_id, CURRENT_USER()"
    )
    assert row == ("ROW", "FULL", 1, 1, 1, 1, 1, "spark@%")


def test_spark_user_has_the_connector_privileges(mariadb_server: MariaDbServer) -> None:
    # One row per grant: the global one, then one per database tests made (a dropped
    # database keeps its grant row).
    grants = " ".join(row[0] for row in mariadb_server.query("SHOW GRANTS FOR CURRENT_USER()"))
    for privilege in (
        "SELECT",
        "RELOAD",
        "SHOW DATABASES",
        "LOCK TABLES",
        "REPLICATION SLAVE",
        "BINLOG MONITOR",  # what REPLICATION CLIENT is since 10.5
        "SLAVE MONITOR",  # REPLICA MONITOR, as SHOW GRANTS spells it
    ):
        assert privilege in grants


@pytest.mark.quick
def test_binlog_grows_with_an_insert(mariadb_server: MariaDbServer, mariadb_database: str) -> None:
    mariadb_server.execute(
        "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))", mariadb_database
    )
    # SHOW BINARY LOG STATUS is MySQL's (8.2+) spelling; MariaDB 10.11 has SHOW BINLOG STATUS.
    [(file, before, *_)] = mariadb_server.query("SHOW MASTER STATUS")
    [(gtid_before,)] = mariadb_server.query("SELECT @@gtid_binlog_pos")
    mariadb_server.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')", mariadb_database)
    [(file_after, after, *_)] = mariadb_server.query("SHOW BINLOG STATUS")
    [(gtid_after,)] = mariadb_server.query("SELECT @@gtid_binlog_pos")

    assert file_after == file
    assert after > before
    assert gtid_after != gtid_before
    assert (file, after) in mariadb_server.query("SHOW BINARY LOGS")
    events = mariadb_server.query(f"SHOW BINLOG EVENTS IN '{file}' FROM {before}")
    kinds = [event[2] for event in events]
    assert "Annotate_rows" in kinds
    assert "Write_rows_v1" in kinds
    annotated = next(event[5] for event in events if event[2] == "Annotate_rows")
    assert annotated == "INSERT INTO items VALUES (1, 'one'), (2, 'two')"


def test_password_is_checked_and_never_written(mariadb_server: MariaDbServer) -> None:
    import pymysql

    with pytest.raises(pymysql.err.OperationalError, match="Access denied"):
        pymysql.connect(
            host=mariadb_server.host,
            port=mariadb_server.port,
            user=mariadb_server.user,
            password="not-" + mariadb_server.password,
        )
    assert mariadb_server.password not in mariadb_server.dsn_summary()
    secret = mariadb_server.password.encode()
    written = [path for path in Path(mariadb_server.workdir).rglob("*") if path.is_file()]
    assert any(path.name.startswith("mariadb-bin.") for path in written)
    assert [path for path in written if secret in path.read_bytes()] == []
