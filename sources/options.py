"""The ``txn-cdc`` options, parsed once into typed, frozen, self-validating configs.

:class:`SourceOptions` holds the options every connector shares; the connector's own options
(``path`` for ``debezium-json``, ``dsn`` and ``slot`` for ``postgres``, ...) are parsed by the
connector's :class:`ConnectorOptions` subclass, found through :mod:`.registry`, and travel in
:attr:`SourceOptions.connector_options`.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from spark_ckpt.errors import InvalidOptionError
from spark_ckpt.model.option_types import Boolean, Choice, Duration, PositiveInt, Size, Text
from spark_ckpt.model.options import (
    IDENTITY_OPTION,
    OptionReader,
    OptionSpec,
    declared,
    option_names,
    option_prefixes,
    read_declared,
)
from spark_ckpt.state.storage_options import StorageOptions

from .registry import CONNECTORS

__all__ = [
    "COMMON_OPTIONS",
    "COMMON_OPTION_SPECS",
    "IDENTITY_OPTION",
    "SNAPSHOT_CHUNK_ROWS",
    "SNAPSHOT_DIR",
    "SNAPSHOT_PARALLELISM",
    "SOFT_DECLINE_TIMEOUT",
    "STORAGE_PREFIX",
    "STREAM_BUFFER_SIZE",
    "ConnectorOptions",
    "SourceOptions",
    "connector_options_class",
]

STORAGE_PREFIX = "storageOptions."
"""``storageOptions.<KEY>``: an object-store setting for the connector's files (change log,
snapshot spill), overriding the session's."""
SOFT_DECLINE_TIMEOUT = 300.0
"""``softDeclineTimeout``'s default, 5 minutes: how long held-back data may make no progress
before the source declines hard. Debezium writes a transaction's records within seconds of its
commit, and a snapshot that is still being read keeps growing, so minutes without progress mean
a stuck producer or a broken log; the failure policy then restarts or fails the query instead
of it reporting health forever. ``unlimited`` restores the old behaviour (never escalate)."""

CONNECTOR: OptionSpec[str] = OptionSpec(
    "connector",
    "`debezium-json`, `kafka` or `postgres`: which connector reads the external system",
    Choice(tuple(CONNECTORS)),
    required="one of " + ", ".join(CONNECTORS),
)
MAX_CHANGES_PER_TRIGGER: OptionSpec[int] = OptionSpec(
    "maxChangesPerTrigger",
    "soft cap on the changes in a batch: a batch ends at the last transaction boundary under "
    "it; a single larger transaction is delivered whole, in one batch",
    PositiveInt(),
)
SOFT_DECLINE: OptionSpec[float] = OptionSpec(
    "softDeclineTimeout",
    "held-back data (an incomplete transaction, a snapshot being read) that has made no "
    "progress for this long is declined hard, naming the oldest unit it holds, and the failure "
    "policy applies (FLIP-170's local tolerance; see *Held-back data* for why 5 minutes); "
    "`unlimited` never escalates; Spark durations: `500ms`, `30s`, `10min`, `1h`",
    Duration(unlimited=True),
    default=SOFT_DECLINE_TIMEOUT,
)
CHANGES_PER_PARTITION: OptionSpec[int] = OptionSpec(
    "changesPerPartition",
    "a batch is split into Spark input partitions of about this many changes, at transaction "
    "boundaries. Spark runs each partition of a Python source as a task with a fixed cost of "
    "its own (about 35 ms of wall time on 2 cores), so fewer, larger partitions are faster as "
    "long as every core has one",
    PositiveInt(),
    default_note="per connector (below)",
)
GATE: OptionSpec[str] = OptionSpec(
    "gate",
    "`off` cuts batches exactly at the cap, splitting transactions: only for measuring what "
    "the gate costs",
    Choice(("on", "off")),
    default="on",
)
COLUMN_TYPES: OptionSpec[bool] = OptionSpec(
    "columnTypes",
    "add a last column, `column_types string`: each image's column types as JSON "
    '(`{"id": "bigint", "total": "decimal(12,2)"}`), where the connector knows them '
    "(`postgres`: the catalog's and wal2json's types; `debezium-json` and `kafka`: the "
    "record's Kafka Connect schema, null without one). Mirror mode types its tables from it",
    Boolean(),
    default=False,
)
STORAGE: OptionSpec[str] = OptionSpec(
    STORAGE_PREFIX,
    "an object-store setting for the connector's files (change log, snapshot spill), "
    "overriding the session's (`storageOptions.AWS_REGION`, ...)",
    placeholder="KEY",
)

SNAPSHOT_DIR: OptionSpec[str] = OptionSpec(
    "snapshotDir",
    "where the snapshot spills its rows, a local directory or an object-store URI (executors "
    "must see it: shared storage beyond `local` mode)",
    Text(),
    default_note="the driver's temp directory",
)
"""A connector with a one-unit snapshot (postgres, mysql) lists it among its own options."""

STREAM_BUFFER_SIZE: OptionSpec[int] = OptionSpec(
    "streamBufferSize",
    "compressed bytes of read changes the driver keeps in memory; beyond it they spill to "
    "`snapshotDir/stream/` (see *Huge transactions*)",
    Size(),
    default=256 << 20,
)
"""The memory limit of a connector's change store (:mod:`.change_store`): postgres, mysql."""

SNAPSHOT_CHUNK_ROWS: OptionSpec[int] = OptionSpec(
    "snapshotChunkRows", "`snapshot=incremental`: rows per chunk", PositiveInt(), default=50_000
)
SNAPSHOT_PARALLELISM: OptionSpec[int] = OptionSpec(
    "snapshotParallelism",
    "`snapshot=incremental`: chunks read at once, each by an executor task (set it to the "
    "executors' cores)",
    PositiveInt(),
    default=2,
)
"""A connector with an incremental snapshot (postgres, mysql) lists these two among its own."""

COMMON_OPTION_SPECS: tuple[OptionSpec[Any], ...] = (
    CONNECTOR,
    MAX_CHANGES_PER_TRIGGER,
    SOFT_DECLINE,
    CHANGES_PER_PARTITION,
    GATE,
    COLUMN_TYPES,
    STORAGE,
)
"""The options of every connector, in their documented spelling, as the reference lists them."""
COMMON_OPTIONS = option_names(COMMON_OPTION_SPECS)
"""The names of the single options among :data:`COMMON_OPTION_SPECS`."""


class ConnectorOptions(abc.ABC):
    """A connector's own options, parsed from the reader: pure data.

    Subclasses are frozen dataclasses in the connector's folder, registered in :mod:`.registry`
    with the builder that turns them into the connector.
    """

    OPTIONS: ClassVar[tuple[OptionSpec[Any], ...]]
    """The connector's own options, documented: the reference's table and the names below."""

    NAMES: ClassVar[tuple[str, ...]]
    """The connector's own options, in their documented spelling (derived from OPTIONS)."""

    PREFIXES: ClassVar[tuple[str, ...]]
    """Option families the connector takes free keys under (``kafka.``), besides its NAMES
    (derived from OPTIONS)."""

    CHANGES_PER_PARTITION: ClassVar[int] = 50_000
    """The connector's default for ``changesPerPartition``."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        # Names are derived from the documented options, so none is accepted undocumented.
        super().__init_subclass__(**kwargs)
        cls.NAMES = option_names(cls.OPTIONS)
        cls.PREFIXES = option_prefixes(cls.OPTIONS)

    @classmethod
    @abc.abstractmethod
    def parse(cls, options: OptionReader) -> ConnectorOptions:
        """Read and validate the connector's options (driver, once per query start)."""


def connector_options_class(connector: str) -> type[ConnectorOptions]:
    """The options class of ``connector``, a key of :data:`.registry.CONNECTORS`.

    Driver, once per query start; imports that connector's options module and no other.
    """
    module, _, name = CONNECTORS[connector].options.partition(":")
    cls: type[ConnectorOptions] = getattr(importlib.import_module(module), name)
    return cls


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one ``txn-cdc`` source.

    Attributes
    ----------
    connector
        Which connector reads the external system.
    connector_options
        The connector's own options.
    max_changes_per_trigger
        Soft cap on changes per batch (a batch ends at the last transaction boundary under it; a
        larger transaction is delivered whole). None: no cap.
    soft_decline_timeout
        Seconds held-back data may make no progress before the source declines hard (inf:
        never).
    changes_per_partition
        Changes per Spark input partition (split at transaction boundaries).
    gated
        False cuts batches anywhere (splitting transactions): only for measuring the gate.
    column_types
        Add the ``column_types`` column: each image's column types as Spark SQL type names,
        where the connector knows them (null where it does not).
    identity
        The supervised query this source serves, when it was created by a supervisor's build.
    storage
        How the connector's files are reached on object stores: the session's settings
        overridden by ``storageOptions.<KEY>``.
    """

    connector: str
    connector_options: ConnectorOptions
    changes_per_partition: int
    max_changes_per_trigger: int | None = declared(MAX_CHANGES_PER_TRIGGER)
    soft_decline_timeout: float = declared(SOFT_DECLINE)
    column_types: bool = declared(COLUMN_TYPES)
    gated: bool = True
    identity: str | None = None
    storage: StorageOptions = field(default_factory=StorageOptions)

    @classmethod
    def parse(
        cls, options: Mapping[str, str], storage: StorageOptions | None = None
    ) -> SourceOptions:
        """Parse the options Spark passed to the data source (driver, once per query start).

        ``storage`` holds the session's storage settings (see :class:`StorageOptions`).

        Raises
        ------
        ConfigError
            For an unknown option, a missing required one or a bad value; the message names the
            option, the value and what is accepted.
        """
        classes = {name: connector_options_class(name) for name in CONNECTORS}
        # Every connector's options are known words, so a typo is named whichever one is used.
        names = [*COMMON_OPTIONS, *dict.fromkeys(n for c in classes.values() for n in c.NAMES)]
        prefixes = [STORAGE_PREFIX, *dict.fromkeys(p for c in classes.values() for p in c.PREFIXES)]
        reader = OptionReader(
            options, "txn-cdc", names, ignored=[IDENTITY_OPTION], prefixes=prefixes
        )
        connector = CONNECTOR.read(reader)
        assert connector is not None
        own = classes[connector]
        connector_options = own.parse(reader)
        for name in names:
            if name not in COMMON_OPTIONS and name not in own.NAMES:
                reader.forbid(name, f"no value: the {connector} connector does not read it")
        for prefix in prefixes:
            if prefix != STORAGE_PREFIX and prefix not in own.PREFIXES:
                for key in reader.prefixed(prefix):
                    # The value is not shown: client settings hold passwords.
                    raise InvalidOptionError(
                        prefix + key, "***", f"no value: the {connector} connector does not read it"
                    )
        # The one option whose default is the connector's.
        own_default = dataclasses.replace(CHANGES_PER_PARTITION, default=own.CHANGES_PER_PARTITION)
        per_partition = own_default.read(reader)
        assert per_partition is not None
        return cls(
            connector=connector,
            connector_options=connector_options,
            changes_per_partition=per_partition,
            gated=GATE.read(reader) == "on",
            **read_declared(cls, reader),
            identity=reader.raw(IDENTITY_OPTION),
            storage=StorageOptions.of(
                (storage or StorageOptions()).as_dict(), reader.prefixed(STORAGE_PREFIX)
            ),
        )
