"""The ``postgres`` connector's own options."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from spark_ckpt.errors import ConfigError, InvalidOptionError
from spark_ckpt.model.options import OptionReader, OptionSpec
from spark_ckpt.state.storage import Location

from ..options import ConnectorOptions
from .plugins import PLUGIN, PLUGINS

if TYPE_CHECKING:
    from ..connector import ChangeConnector
    from ..options import SourceOptions

__all__ = ["PostgresOptions"]

SnapshotMode = Literal["initial", "never", "incremental"]


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

    OPTIONS: ClassVar[tuple[OptionSpec, ...]] = (
        OptionSpec(
            "dsn",
            "libpq connection string or URI; a password in it is never printed (errors show `***`)",
            default_note="required",
        ),
        OptionSpec(
            "slot",
            "logical replication slot (lower-case letters, digits, `_`), created with the "
            "plugin below when missing",
            default_note="required",
        ),
        OptionSpec(
            "tables",
            "`schema.table` list; each needs a primary key, a replica identity index, or "
            "`REPLICA IDENTITY FULL`",
            default_note="required",
        ),
        OptionSpec(
            "plugin",
            "the output plugin: `pgoutput` (built into PostgreSQL, what every managed "
            "PostgreSQL offers) or `wal2json` (an extension)",
            default=PLUGIN,
        ),
        OptionSpec(
            "publication",
            "`pgoutput` only: the publication to stream; created `FOR TABLE` the tables when "
            "missing, checked when it exists",
            default_note="`spark_ckpt_<slot>`",
        ),
        OptionSpec(
            "snapshot",
            "`initial`: the tables' existing rows first (`op='r'`) as one consistent unit, then "
            "the changes; `incremental`: the rows in resumable primary-key chunks alongside the "
            "changes; `never`: changes from the slot's position",
            default="initial",
        ),
        OptionSpec("snapshotChunkRows", "`snapshot=incremental`: rows per chunk", default="50000"),
        OptionSpec(
            "snapshotParallelism",
            "`snapshot=incremental`: chunks read at once, each by an executor task (set it to "
            "the executors' cores)",
            default="2",
        ),
        OptionSpec(
            "snapshotDir",
            "where the snapshot spills its rows, a local directory or an object-store URI "
            "(executors must see it: shared storage beyond `local` mode)",
            default_note="the driver's temp directory",
        ),
        OptionSpec(
            "streamBufferSize",
            "compressed bytes of peeked changes the driver keeps in memory; beyond it they spill "
            "to `snapshotDir/stream/` (see *Huge transactions*)",
            default="256m",
        ),
        OptionSpec(
            "heartbeatInterval",
            "after this long without a batch, write a heartbeat into the WAL and confirm the "
            "slot past what it decoded with nothing for the query (an empty batch); `unlimited` "
            "turns it off",
            default="60s",
        ),
    )

    dsn: str
    slot: str
    tables: tuple[str, ...]
    snapshot: SnapshotMode = "initial"
    snapshot_dir: str | None = None
    heartbeat_interval: float = 60.0
    plugin: str = PLUGIN
    publication: str | None = None
    stream_buffer_size: int = 256 * 1024 * 1024
    snapshot_chunk_rows: int = 50_000
    snapshot_parallelism: int = 2

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
        missing = [n for n in ("dsn", "slot", "tables") if options.text(n) is None]
        if missing:
            raise ConfigError(
                "the postgres connector needs the options "
                + ", ".join(repr(m) for m in missing)
                + ": .option('dsn', 'postgresql://user@host/db').option('slot', 'orders_cdc')"
                ".option('tables', 'public.orders,public.items')"
            )
        options.forbid("path", "no value: the postgres connector reads the option 'dsn'")
        options.forbid("fileOrder", "no value: only debezium-json reads files")
        if (options.text("gate") or "on").lower() == "off":
            raise InvalidOptionError(
                "gate",
                options.raw("gate"),
                "on: the postgres connector delivers whole transactions only",
            )
        slot = options.text("slot")
        assert slot is not None
        if not re.fullmatch(r"[a-z0-9_]{1,63}", slot):
            raise InvalidOptionError(
                "slot", slot, "a replication slot name: 1 to 63 lower-case letters, digits or _"
            )
        plugin = options.choice("plugin", PLUGINS, PLUGIN)
        publication = options.text("publication")
        if publication is not None and plugin != "pgoutput":
            raise InvalidOptionError(
                "publication", publication, "no value: only plugin=pgoutput streams a publication"
            )
        if publication is not None and not re.fullmatch(r"[a-z0-9_]{1,63}", publication):
            raise InvalidOptionError(
                "publication",
                publication,
                "a publication name: 1 to 63 lower-case letters, digits or _",
            )
        directory = options.text("snapshotDir")
        if directory is not None:
            Location(directory)  # refuses a scheme no store supports, naming it
        dsn = options.text("dsn")
        assert dsn is not None
        return cls(
            dsn=dsn,
            slot=slot,
            tables=options.names("tables", "schema.table names"),
            snapshot=options.choice("snapshot", ("initial", "never", "incremental"), "initial"),
            snapshot_dir=directory,
            heartbeat_interval=options.duration("heartbeatInterval", 60.0, allow_unlimited=True),
            plugin=plugin,
            publication=publication,
            stream_buffer_size=options.size("streamBufferSize", 256 * 1024 * 1024),
            snapshot_chunk_rows=options.positive_int("snapshotChunkRows", 50_000) or 50_000,
            snapshot_parallelism=options.positive_int("snapshotParallelism", 2) or 2,
        )

    def connector(self, common: SourceOptions) -> ChangeConnector:
        """The connector, with server, tables and slot checked (driver, once per query run)."""
        from .connector import PostgresConnector

        connector = PostgresConnector(
            self.dsn,
            self.slot,
            list(self.tables),
            self.snapshot,
            common.changes_per_partition,
            Location(self.snapshot_dir, common.storage) if self.snapshot_dir else None,
            column_types=common.column_types,
            heartbeat_interval=self.heartbeat_interval,
            plugin=self.plugin,
            publication=self.publication,
            buffer_size=self.stream_buffer_size,
            chunk_rows=self.snapshot_chunk_rows,
            parallelism=self.snapshot_parallelism,
        )
        connector.check()
        return connector
