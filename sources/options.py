"""The ``txn-cdc`` options, parsed once into a typed, frozen, self-validating config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spark_ckpt.errors import ConfigError, InvalidOptionError, UnknownOptionError
from spark_ckpt.model.durations import UNLIMITED, parse_duration
from spark_ckpt.state.files import local_path
from spark_ckpt.state.registry import IDENTITY_OPTION

from .debezium.log_files import FILE_ORDERS, FileOrder

__all__ = ["CONNECTORS", "IDENTITY_OPTION", "OPTION_NAMES", "SourceOptions"]

Connector = Literal["debezium-json", "postgres"]
CONNECTORS: tuple[Connector, ...] = ("debezium-json", "postgres")
SnapshotMode = Literal["initial", "never"]

# Documented spelling of every option. Spark hands options over lower-cased.
OPTION_NAMES: dict[str, str] = {
    name.lower(): name
    for name in (
        "connector",
        "path",
        "maxChangesPerTrigger",
        "softDeclineTimeout",
        "changesPerPartition",
        "gate",
        "fileOrder",
        "dsn",
        "slot",
        "tables",
        "snapshot",
        "snapshotDir",
    )
}


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidOptionError(name, raw, "a positive integer")
    return value


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one ``txn-cdc`` source.

    Attributes
    ----------
    connector
        Which connector reads the external system.
    path
        ``debezium-json``: the change-log directory.
    max_changes_per_trigger
        Soft cap on changes per batch (a batch ends at the last transaction boundary under it; a
        larger transaction is delivered whole). None: no cap.
    soft_decline_timeout
        Seconds a streak of soft declines may last before it is reported as hard (inf: never).
    changes_per_partition
        Changes per Spark input partition (split at transaction boundaries).
    gated
        False cuts batches anywhere (splitting transactions): only for measuring the gate.
    file_order
        ``debezium-json``: how file names order the log (``name`` or ``natural``).
    identity
        The supervised query this source serves, when it was created by a supervisor's build.
    dsn
        ``postgres``: libpq connection string or URI (a password in it is never printed).
    slot
        ``postgres``: the logical replication slot (created when missing).
    tables
        ``postgres``: the captured tables, ``schema.table``.
    snapshot
        ``postgres``: ``initial`` reads the tables' rows first; ``never`` streams changes only.
    snapshot_dir
        ``postgres``: where the snapshot spills rows (None: under the system temp directory).
    """

    connector: Connector
    path: str | None = None
    max_changes_per_trigger: int | None = None
    soft_decline_timeout: float = UNLIMITED
    changes_per_partition: int = 50_000
    gated: bool = True
    file_order: FileOrder = "name"
    identity: str | None = None
    dsn: str | None = None
    slot: str | None = None
    tables: tuple[str, ...] = ()
    snapshot: SnapshotMode = "initial"
    snapshot_dir: str | None = None

    def __repr__(self) -> str:
        # Options end up in logs and errors: never show the DSN (it may hold a password).
        shown = {k: v for k, v in self.__dict__.items() if k != "dsn"}
        return f"SourceOptions({shown}, dsn={'<set>' if self.dsn else None})"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Parse the options Spark passed to the data source (driver, once per query start).

        Raises
        ------
        ConfigError
            For an unknown option, a missing required one or a bad value; the message names the
            option, the value and what is accepted.
        """
        lowered = {k.lower(): v for k, v in options.items()}
        for key in lowered:
            if key not in OPTION_NAMES and key != IDENTITY_OPTION:
                raise UnknownOptionError(key, "txn-cdc", list(OPTION_NAMES.values()))
        connector = lowered.get("connector")
        if connector is None:
            raise ConfigError(
                "txn-cdc needs the option 'connector': one of " + ", ".join(CONNECTORS)
            )
        by_name: dict[str, Connector] = {name: name for name in CONNECTORS}
        if connector not in by_name:
            raise InvalidOptionError("connector", connector, "one of " + ", ".join(CONNECTORS))
        path = lowered.get("path")
        if connector == "postgres" and path:
            raise InvalidOptionError(
                "path", path, "no value: the postgres connector reads the option 'dsn'"
            )
        if connector == "debezium-json" and not path:
            raise ConfigError(
                "the debezium-json connector needs the option 'path': the directory of *.jsonl "
                "change files (.option('path', '/data/changes') or .load('/data/changes'))"
            )
        postgres = _postgres_options(lowered) if connector == "postgres" else {}
        gate = lowered.get("gate", "on").strip().lower()
        if gate not in ("on", "off"):
            raise InvalidOptionError("gate", lowered["gate"], "one of: on, off")
        file_order = lowered.get("fileorder", "name").strip().lower()
        if file_order not in FILE_ORDERS:
            raise InvalidOptionError(
                "fileOrder", lowered["fileorder"], "one of: " + ", ".join(FILE_ORDERS)
            )
        if connector == "postgres" and "fileorder" in lowered:
            raise InvalidOptionError(
                "fileOrder", lowered["fileorder"], "no value: only debezium-json reads files"
            )
        timeout = UNLIMITED
        if "softdeclinetimeout" in lowered:
            try:
                timeout = parse_duration(
                    lowered["softdeclinetimeout"],
                    key="option 'softDeclineTimeout'",
                    allow_unlimited=True,
                )
            except ConfigError as e:
                raise InvalidOptionError(
                    "softDeclineTimeout",
                    lowered["softdeclinetimeout"],
                    "a duration such as 500ms, 30s, 10min, 1h, or unlimited",
                ) from e
            if timeout <= 0:
                raise InvalidOptionError(
                    "softDeclineTimeout", lowered["softdeclinetimeout"], "a positive duration"
                )
        return cls(
            connector=by_name[connector],
            path=local_path("path", path) if path else None,
            max_changes_per_trigger=_positive_int(lowered, "maxChangesPerTrigger"),
            soft_decline_timeout=timeout,
            changes_per_partition=_positive_int(lowered, "changesPerPartition") or 50_000,
            gated=gate == "on",
            file_order="natural" if file_order == "natural" else "name",
            identity=lowered.get(IDENTITY_OPTION),
            **postgres,
        )


def _postgres_options(lowered: Mapping[str, str]) -> dict[str, Any]:
    missing = [name for name in ("dsn", "slot", "tables") if not lowered.get(name, "").strip()]
    if missing:
        raise ConfigError(
            "the postgres connector needs the options "
            + ", ".join(repr(OPTION_NAMES[m]) for m in missing)
            + ": .option('dsn', 'postgresql://user@host/db').option('slot', 'orders_cdc')"
            ".option('tables', 'public.orders,public.items')"
        )
    slot = lowered["slot"].strip()
    if not re.fullmatch(r"[a-z0-9_]{1,63}", slot):
        raise InvalidOptionError(
            "slot", slot, "a replication slot name: 1 to 63 lower-case letters, digits or _"
        )
    tables = tuple(t.strip() for t in lowered["tables"].split(",") if t.strip())
    if len(set(tables)) != len(tables):
        raise InvalidOptionError("tables", lowered["tables"], "distinct schema.table names")
    snapshot = lowered.get("snapshot", "initial").strip().lower()
    if snapshot not in ("initial", "never"):
        raise InvalidOptionError("snapshot", lowered["snapshot"], "one of: initial, never")
    if lowered.get("gate", "on").strip().lower() == "off":
        raise InvalidOptionError(
            "gate", lowered["gate"], "on: the postgres connector delivers whole transactions only"
        )
    directory = lowered.get("snapshotdir")
    return {
        "dsn": lowered["dsn"].strip(),
        "slot": slot,
        "tables": tables,
        "snapshot": snapshot,
        "snapshot_dir": local_path("snapshotDir", directory) if directory else None,
    }
