"""Capture the binlog events a MariaDB server writes for a table of every column type, as a fixture.

A fresh server (:class:`harness.servers.mariadb.MariaDbServer`, the tests' configuration:
``binlog_row_metadata=FULL``) gets ``types.every_type`` with a column of each type the ``mysql``
connector decodes, then the rows of :data:`harness.workloads.mysql_types.STATEMENTS`: the
extremes of each type, a row of nulls, text in three character sets, an update and a delete.
The binlog is read with ``mysql-replication`` as the connector reads it, and every packet of
the replication stream is kept as the server sent it (hex), with what the replay needs (the
server's version, whether events carry checksums), and the table's rows as a query returns them
(PyMySQL, in UTC), each value tagged with its Python type. ``tests/unit/test_mysql_types.py``
replays the packets through the same client and the connector's decoding, so the unit tests
decode real binlog events without a server, and checks that a queried value (a snapshot's) gives
the same JSON value as the binlog's.

Run: ``python bench/capture_mysql_types_fixture.py`` (needs MariaDB, as the test setup installs
it); it writes ``tests/fixtures/mysql/types-mariadb-<version>.json``.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import decimal
import json
import tempfile
from pathlib import Path
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader

from harness.servers.mariadb import MariaDbServer
from harness.workloads.mysql_types import STATEMENTS, TABLE

ROOT = Path(__file__).resolve().parents[1]
DATABASE = "types"


class RecordingConnection(pymysql.connections.Connection):  # type: ignore[misc]
    """A PyMySQL connection that keeps every packet it reads (the binlog stream's, here)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.recorded: list[bytes] = []
        super().__init__(*args, **kwargs)

    def _read_packet(self, packet_type: Any = pymysql.protocol.MysqlPacket) -> Any:
        packet = super()._read_packet(packet_type)
        self.recorded.append(bytes(packet._data))
        return packet


def capture(out: Path | None) -> Path:
    """Write the fixture; return its path."""
    with tempfile.TemporaryDirectory(prefix="spark-ckpt-types-") as workdir:
        server = MariaDbServer(workdir).start()
        try:
            fixture = _capture(server)
        finally:
            server.stop()
    version = fixture["version"].split("-")[0]
    path = out or ROOT / "tests" / "fixtures" / "mysql" / f"types-mariadb-{version}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fixture, indent=1) + "\n", encoding="utf-8")
    return path


def _capture(server: MariaDbServer) -> dict[str, Any]:
    server.create_database(DATABASE)
    server.execute(TABLE, DATABASE)
    file, pos, *_ = server.query("SHOW MASTER STATUS")[0]
    for statement in STATEMENTS:
        server.execute(statement, DATABASE)
    settings = {
        "host": server.host,
        "port": server.port,
        "user": server.user,
        "passwd": server.password,
    }
    stream = BinLogStreamReader(
        connection_settings=settings,
        server_id=4242,
        resume_stream=True,
        blocking=False,
        log_file=file,
        log_pos=int(pos),
        only_schemas=[DATABASE],
        pymysql_wrapper=RecordingConnection,
        enable_logging=False,
    )
    try:
        while stream.fetchone() is not None:
            pass
        packets = stream._stream_connection.recorded  # read before close() drops it
        use_checksum = bool(stream._BinLogStreamReader__use_checksum)
        mysql_version = stream.mysql_version
    finally:
        stream.close()
    (version,) = server.query("SELECT VERSION()")[0]
    with server.connect(DATABASE) as conn, conn.cursor() as cursor:
        cursor.execute("SET time_zone = '+00:00'")  # as the snapshot reads: TIMESTAMP in UTC
        cursor.execute("SELECT * FROM every_type ORDER BY id")
        names = [column[0] for column in cursor.description]
        queried = [dict(zip(names, map(tagged, row), strict=True)) for row in cursor.fetchall()]
    return {
        "server": "mariadb",
        "version": version,
        "mysql_version": list(mysql_version),
        "use_checksum": use_checksum,
        "table": TABLE,
        "statements": STATEMENTS,
        "packets": [packet.hex() for packet in _binlog_stream(packets)],
        "queried": queried,
    }


ROTATE_EVENT = 4


def _binlog_stream(packets: list[bytes]) -> list[bytes]:
    """The packets from the binlog dump's first event on.

    The server always sends a ROTATE first; before it the connection only logged in and set
    its checksum variables.
    """
    for index, packet in enumerate(packets):
        if len(packet) > 20 and packet[0] == 0 and packet[5] == ROTATE_EVENT:
            return packets[index:]
    raise RuntimeError("the stream read no binlog event")


def tagged(value: Any) -> Any:
    """A value PyMySQL returned, as JSON that keeps its Python type (see the unit test's reader)."""
    if value is None or (isinstance(value, (int, float, str)) and not isinstance(value, bool)):
        return value
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"timedelta_us": value // dt.timedelta(microseconds=1)}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, (set, frozenset)):
        return {"set": sorted(value)}
    raise TypeError(f"a value of type {type(value).__name__} has no tag: {value!r}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="the fixture's path")
    print(capture(parser.parse_args().out))
