"""The ``mysql`` connector's own options (MySQL 8.x and MariaDB 10.6+)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from spark_ckpt.errors import InvalidOptionError
from spark_ckpt.model.option_types import Choice, Names, PositiveInt, Text
from spark_ckpt.model.options import OptionReader, OptionSpec, declared, read_declared

from ..options import (
    SNAPSHOT_CHUNK_ROWS,
    SNAPSHOT_DIR,
    SNAPSHOT_PARALLELISM,
    STREAM_BUFFER_SIZE,
    ConnectorOptions,
)

__all__ = ["MySqlOptions"]

SnapshotMode = Literal["initial", "incremental", "never"]
SNAPSHOT_MODES: tuple[SnapshotMode, ...] = ("initial", "incremental", "never")

HOST: OptionSpec[str] = OptionSpec(
    "host", "the server's host name or address", Text(), default="localhost"
)
PORT: OptionSpec[int] = OptionSpec("port", "the server's port", PositiveInt(), default=3306)
USER: OptionSpec[str] = OptionSpec(
    "user",
    "the user to connect as; it needs `REPLICATION SLAVE`, `REPLICATION CLIENT` (MariaDB: "
    "`BINLOG MONITOR`) and `SELECT` on the tables",
    Text(),
    required=".option('user', 'cdc')",
)
PASSWORD: OptionSpec[str] = OptionSpec(
    "password",
    "the user's password; never printed (errors and logs show `***`)",
    Text(),
    default_note="none",
)
SERVER_ID: OptionSpec[int] = OptionSpec(
    "serverId",
    "the replica server id the connector reads the binlog as: unique among the server's "
    "replicas and readers (as Debezium's `database.server.id`)",
    PositiveInt(),
    default=5_400,
)
TABLES: OptionSpec[tuple[str, ...]] = OptionSpec(
    "tables",
    "`database.table` list; each needs a primary key",
    Names("database.table names"),
    required=".option('tables', 'shop.orders,shop.items')",
)
SNAPSHOT: OptionSpec[SnapshotMode] = OptionSpec(
    "snapshot",
    "`initial`: the tables' existing rows first (`op='r'`) as one consistent unit, then the "
    "changes from the binlog position the snapshot is consistent with (MariaDB: no lock; "
    "MySQL: the global read lock while the snapshot starts, which needs `RELOAD`); "
    "`incremental`: the same rows in primary-key chunks beside the stream, each read on its "
    "own without any lock and reconciled with the binlog's changes of its window, resumable "
    "at the last chunk emitted (each table needs a primary key); `never`: "
    "the changes committed after the query's first start, from the binlog's end then",
    Choice(SNAPSHOT_MODES),
    default="initial",
)


@dataclass(frozen=True)
class MySqlOptions(ConnectorOptions):
    """Options of ``connector=mysql``.

    Attributes
    ----------
    host, port
        Where the server listens.
    user, password
        Whom to connect as (the password is never printed).
    server_id
        The replica server id the binlog is read as.
    tables
        The captured tables, ``database.table``.
    snapshot
        ``initial``: the tables' rows first, as one unit; ``incremental``: in key-range
        chunks beside the stream; ``never``: changes only, from the binlog's end at the
        query's first start.
    snapshot_dir
        Where the snapshot spills its rows (None: the driver's temp directory).
    snapshot_chunk_rows, snapshot_parallelism
        ``snapshot=incremental``: rows per chunk, chunks read at once.
    stream_buffer_size
        Compressed bytes of read changes the driver keeps in memory; beyond it they spill
        (``snapshotDir/stream``, :mod:`..change_store`).
    """

    OPTIONS: ClassVar[tuple[OptionSpec[Any], ...]] = (
        HOST,
        PORT,
        USER,
        PASSWORD,
        SERVER_ID,
        TABLES,
        SNAPSHOT,
        SNAPSHOT_DIR,
        SNAPSHOT_CHUNK_ROWS,
        SNAPSHOT_PARALLELISM,
        STREAM_BUFFER_SIZE,
    )
    CHANGES_PER_PARTITION: ClassVar[int] = 20_000

    user: str = declared(USER)
    tables: tuple[str, ...] = declared(TABLES)
    host: str = declared(HOST)
    port: int = declared(PORT)
    password: str | None = declared(PASSWORD)
    server_id: int = declared(SERVER_ID)
    snapshot: SnapshotMode = declared(SNAPSHOT)
    snapshot_dir: str | None = declared(SNAPSHOT_DIR)
    snapshot_chunk_rows: int = declared(SNAPSHOT_CHUNK_ROWS)
    snapshot_parallelism: int = declared(SNAPSHOT_PARALLELISM)
    stream_buffer_size: int = declared(STREAM_BUFFER_SIZE)

    def __repr__(self) -> str:
        # Options end up in logs and errors: never show the password.
        return (
            f"MySqlOptions(host={self.host!r}, port={self.port!r}, user={self.user!r}, "
            f"password={'<set>' if self.password else None}, server_id={self.server_id!r}, "
            f"tables={self.tables!r}, snapshot={self.snapshot!r}, "
            f"snapshot_dir={self.snapshot_dir!r}, "
            f"snapshot_chunk_rows={self.snapshot_chunk_rows!r}, "
            f"snapshot_parallelism={self.snapshot_parallelism!r}, "
            f"stream_buffer_size={self.stream_buffer_size!r})"
        )

    @classmethod
    def parse(cls, options: OptionReader) -> MySqlOptions:
        """Read the connection and table options (driver, once per query start)."""
        options.forbid("path", "no value: the mysql connector reads options 'host' and 'port'")
        if (options.text("gate") or "on").lower() == "off":
            raise InvalidOptionError(
                "gate", options.raw("gate"), "on: the mysql connector delivers whole transactions"
            )
        parsed = cls(**read_declared(cls, options, "the mysql connector"))
        for name in parsed.tables:
            if name.count(".") != 1 or not all(name.split(".")):
                raise InvalidOptionError(
                    "tables", ",".join(parsed.tables), f"database.table names ({name!r} is not)"
                )
        return parsed
