"""The ``postgres`` connector's own options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from spark_ckpt.errors import InvalidOptionError
from spark_ckpt.model.option_types import Choice, Duration, Names, Text
from spark_ckpt.model.options import OptionReader, OptionSpec, declared, read_declared
from spark_ckpt.model.uris import check_uri

from ..options import (
    SNAPSHOT_CHUNK_ROWS,
    SNAPSHOT_DIR,
    SNAPSHOT_PARALLELISM,
    STREAM_BUFFER_SIZE,
    ConnectorOptions,
)
from .plugins import PLUGIN, PLUGINS

__all__ = ["PostgresOptions"]

SnapshotMode = Literal["initial", "never", "incremental"]
SNAPSHOT_MODES: tuple[SnapshotMode, ...] = ("initial", "never", "incremental")


_NAME = r"[a-z0-9_]{1,63}"

DSN: OptionSpec[str] = OptionSpec(
    "dsn",
    "libpq connection string or URI; a password in it is never printed (errors show `***`)",
    Text(),
    required=".option('dsn', 'postgresql://user@host/db')",
)
SLOT: OptionSpec[str] = OptionSpec(
    "slot",
    "logical replication slot (lower-case letters, digits, `_`), created with the plugin below "
    "when missing",
    Text(_NAME, "a replication slot name: 1 to 63 lower-case letters, digits or _"),
    required=".option('slot', 'orders_cdc')",
)
TABLES: OptionSpec[tuple[str, ...]] = OptionSpec(
    "tables",
    "`schema.table` list; each needs a primary key, a replica identity index, or "
    "`REPLICA IDENTITY FULL`",
    Names("schema.table names"),
    required=".option('tables', 'public.orders,public.items')",
)
PLUGIN_OPTION: OptionSpec[str] = OptionSpec(
    "plugin",
    "the output plugin: `pgoutput` (built into PostgreSQL, what every managed PostgreSQL "
    "offers) or `wal2json` (an extension)",
    Choice(PLUGINS),
    default=PLUGIN,
)
PUBLICATION: OptionSpec[str] = OptionSpec(
    "publication",
    "`pgoutput` only: the publication to stream; created `FOR TABLE` the tables when missing, "
    "checked when it exists",
    Text(_NAME, "a publication name: 1 to 63 lower-case letters, digits or _"),
    default_note="`spark_ckpt_<slot>`",
)
SNAPSHOT: OptionSpec[SnapshotMode] = OptionSpec(
    "snapshot",
    "`initial`: the tables' existing rows first (`op='r'`) as one consistent unit, then the "
    "changes; `incremental`: the rows in resumable primary-key chunks alongside the changes; "
    "`never`: changes from the slot's position",
    Choice(SNAPSHOT_MODES),
    default="initial",
)
HEARTBEAT_INTERVAL: OptionSpec[float] = OptionSpec(
    "heartbeatInterval",
    "after this long without a batch, write a heartbeat into the WAL and confirm the slot past "
    "what it decoded with nothing for the query (an empty batch); `unlimited` turns it off",
    Duration(unlimited=True),
    default=60.0,
)


@dataclass(frozen=True)
class PostgresOptions(ConnectorOptions):
    """Options of ``connector=postgres``.

    Attributes
    ----------
    dsn
        libpq connection string or URI (a password in it is never printed).
    slot
        The logical replication slot (created when missing).
    tables
        The captured tables, ``schema.table``.
    snapshot
        ``initial`` reads the tables' rows first, as one consistent unit; ``incremental`` reads
        them in resumable primary-key chunks alongside the stream; ``never`` streams changes
        only.
    snapshot_dir
        Where the snapshot spills rows: a local directory or an object-store URI that the
        executors can read (None: under the driver's temp directory, for local mode).
    heartbeat_interval
        Seconds without a batch after which the slot is confirmed past what it decoded with
        nothing for the query (an empty batch, after a heartbeat message in the WAL); infinite
        turns heartbeats off.
    plugin
        The logical decoding output plugin: ``wal2json`` (an extension) or ``pgoutput``
        (built into PostgreSQL, streams a publication).
    publication
        pgoutput: the publication (created for the tables when missing; None:
        ``spark_ckpt_<slot>``).
    stream_buffer_size
        Compressed bytes of peeked changes the driver keeps in memory; beyond, they spill to
        the spill location (``snapshotDir``).
    snapshot_chunk_rows, snapshot_parallelism
        ``snapshot=incremental``: rows per chunk, and chunks read at once (by executors).
    """

    OPTIONS: ClassVar[tuple[OptionSpec[Any], ...]] = (
        DSN,
        SLOT,
        TABLES,
        PLUGIN_OPTION,
        PUBLICATION,
        SNAPSHOT,
        SNAPSHOT_CHUNK_ROWS,
        SNAPSHOT_PARALLELISM,
        SNAPSHOT_DIR,
        STREAM_BUFFER_SIZE,
        HEARTBEAT_INTERVAL,
    )

    dsn: str = declared(DSN)
    slot: str = declared(SLOT)
    tables: tuple[str, ...] = declared(TABLES)
    snapshot: SnapshotMode = declared(SNAPSHOT)
    snapshot_dir: str | None = declared(SNAPSHOT_DIR)
    heartbeat_interval: float = declared(HEARTBEAT_INTERVAL)
    plugin: str = declared(PLUGIN_OPTION)
    publication: str | None = declared(PUBLICATION)
    stream_buffer_size: int = declared(STREAM_BUFFER_SIZE)
    snapshot_chunk_rows: int = declared(SNAPSHOT_CHUNK_ROWS)
    snapshot_parallelism: int = declared(SNAPSHOT_PARALLELISM)

    def __repr__(self) -> str:
        # Options end up in logs and errors: never show the DSN (it may hold a password).
        return (
            f"PostgresOptions(dsn=<set>, slot={self.slot!r}, tables={self.tables!r}, "
            f"snapshot={self.snapshot!r}, snapshot_dir={self.snapshot_dir!r}, "
            f"heartbeat_interval={self.heartbeat_interval!r}, plugin={self.plugin!r}, "
            f"publication={self.publication!r}, stream_buffer_size={self.stream_buffer_size!r}, "
            f"snapshot_chunk_rows={self.snapshot_chunk_rows!r}, "
            f"snapshot_parallelism={self.snapshot_parallelism!r})"
        )

    @classmethod
    def parse(cls, options: OptionReader) -> PostgresOptions:
        """Read the connection, slot, tables and snapshot options (driver, once per start)."""
        options.forbid("path", "no value: the postgres connector reads the option 'dsn'")
        options.forbid("fileOrder", "no value: only debezium-json reads files")
        if (options.text("gate") or "on").lower() == "off":
            raise InvalidOptionError(
                "gate",
                options.raw("gate"),
                "on: the postgres connector delivers whole transactions only",
            )
        parsed = cls(**read_declared(cls, options, "the postgres connector"))
        if parsed.publication is not None and parsed.plugin != "pgoutput":
            raise InvalidOptionError(
                "publication",
                parsed.publication,
                "no value: only plugin=pgoutput streams a publication",
            )
        if parsed.snapshot_dir is not None:
            check_uri(parsed.snapshot_dir)  # refuses a scheme no store supports, naming it
        return parsed
