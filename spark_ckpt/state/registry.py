"""How data-plane processes tell the driver's control plane about the queries they serve.

Sources and sinks run in processes the control plane never sees (a fresh driver-side process per
sink commit, a long-lived reader process per source), and Spark tells them neither the query's
checkpoint location nor always its id. ``install(spark)`` creates a driver-local state directory
and registers the data sources as subclasses whose class attribute :attr:`control_state` names it;
class attributes travel with the pickled class to every such process. A sink that knows its query
id writes a small registration file there, and the listener looks registrations up by the query
id of each event. Statically registered data sources have no state (``None``): they work, without
the control plane.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from spark_ckpt.errors import ConfigError
from spark_ckpt.model.config import CkptConfig
from spark_ckpt.model.declines import DeclineReport
from spark_ckpt.model.events import HistoryEvent, event_from_json
from spark_ckpt.model.options import IDENTITY_OPTION
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.files import write_atomically, write_if_changed
from spark_ckpt.state.restore import RestorePoint
from spark_ckpt.state.storage import StorageOptions

__all__ = ["IDENTITY_OPTION", "ControlState", "DrainReport", "Registration"]


@dataclass(frozen=True)
class Registration:
    """A data-plane component serving one query, as its completion hook receives it.

    Attributes
    ----------
    kind
        The component's format name (``delta-2pc``); selects its completion hook.
    query_id
        The query's id.
    checkpoint_location
        The query's checkpoint location (the hook's manifests; the query's history).
    table
        The Delta table the component appends every batch to (for ``delta-2pc`` in mirror
        mode, the change log).
    storage
        How both are reached (object stores). Kept in the control plane's private driver-local
        directory only: it may hold credentials.
    """

    kind: str
    query_id: str
    checkpoint_location: str
    table: str
    storage: StorageOptions = field(default_factory=StorageOptions, repr=False)

    def checkpoint(self) -> SparkCheckpoint:
        """The checkpoint location, reachable with :attr:`storage`."""
        return SparkCheckpoint(self.checkpoint_location, self.storage)

    def to_json(self) -> dict[str, Any]:
        """The registration's file body (storage included: the directory is private)."""
        return {
            "kind": self.kind,
            "checkpointLocation": self.checkpoint_location,
            "table": self.table,
            "storage": self.storage.as_dict(),
        }

    @classmethod
    def from_json(cls, query_id: str, body: dict[str, Any]) -> Registration:
        """Read :meth:`to_json`'s form, or the earlier one (a ``settings`` object)."""
        settings = body.get("settings") or body
        return cls(
            str(body["kind"]),
            query_id,
            str(settings.get("checkpointLocation", "")),
            str(settings.get("table", settings.get("path", ""))),
            StorageOptions.of(settings.get("storage") or {}),
        )


@dataclass(frozen=True)
class DrainReport:
    """One source's answer to a drain request.

    Attributes
    ----------
    fixed_at
        When the source fixed its end (seconds since the epoch): data that arrives later is
        not read.
    reached
        True once the source has offered everything up to that end (no further batch).
    """

    fixed_at: float
    reached: bool = False

    def to_json(self) -> dict[str, Any]:
        """The stored form."""
        return {"fixedAt": self.fixed_at, "reached": self.reached}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> DrainReport:
        """Read :meth:`to_json`'s form."""
        return cls(float(value["fixedAt"]), bool(value.get("reached")))


@dataclass(frozen=True)
class ControlState:
    """The control plane's driver-local state directory (picklable, travels with classes).

    Attributes
    ----------
    directory
        The driver-local directory.
    storage
        The session's storage settings (its ``spark.hadoop.fs.s3a.*`` keys), the defaults of
        every source's and sink's object-store options.
    """

    directory: str
    storage: StorageOptions = field(default_factory=StorageOptions)

    def _query_dir(self, query_id: str) -> str:
        return os.path.join(self.directory, "queries", query_id)

    def register(self, registration: Registration) -> None:
        """Record a registration (idempotent; cheap when it is already there)."""
        path = os.path.join(self._query_dir(registration.query_id), f"{registration.kind}.json")
        body = json.dumps(registration.to_json(), sort_keys=True).encode()
        write_if_changed(path, body)

    def registrations(self, query_id: str) -> list[Registration]:
        """The registrations for ``query_id`` (none when it registered nothing)."""
        return [
            Registration.from_json(query_id, body)
            for body in _read_json_files(self._query_dir(query_id))
        ]

    # -- supervised sources ------------------------------------------------------------------
    #
    # A source is not told which query it serves. The supervisor builds each query itself, so
    # while its build() runs (serialised by a lock in the driver) it leaves an identity here;
    # the source's DataSource, created during that build, claims it into its options, which
    # travel to the reader process. The reader then reports its declines under that identity.

    def _pending_path(self) -> str:
        return os.path.join(self.directory, "pending-source-identity")

    def set_pending_identity(self, identity: str | None) -> None:
        """Offer ``identity`` to sources created from now on (None: withdraw it)."""
        if identity is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._pending_path())
            return
        write_atomically(self._pending_path(), identity.encode())

    def claim_identity(self, options: MutableMapping[str, str]) -> None:
        """Put the pending identity into a source's ``options`` (in its ``__init__``).

        Spark creates a query's sources while ``load()`` runs, that is inside the supervisor's
        build, so they take the identity offered then.
        """
        identity = self.pending_identity()
        if identity is not None:
            options[IDENTITY_OPTION] = identity

    def pending_identity(self) -> str | None:
        """The identity a source created now should take, if a supervised build is running."""
        try:
            with open(self._pending_path(), encoding="utf-8") as handle:
                return handle.read().strip() or None
        except FileNotFoundError:
            return None

    def report_source(
        self, identity: str, decline: DeclineReport | None, drain: DrainReport | None = None
    ) -> None:
        """Publish one source's current decline and drain state (reader process, on change)."""
        body = {
            "decline": None if decline is None else decline.to_json(),
            "drain": None if drain is None else drain.to_json(),
        }
        path = os.path.join(self.directory, "sources", identity, f"{os.getpid()}.json")
        write_atomically(path, json.dumps(body, sort_keys=True).encode())

    def _source_reports(self, identity: str) -> list[dict[str, Any]]:
        return _read_json_files(os.path.join(self.directory, "sources", identity))

    def declines(self, identity: str) -> list[DeclineReport]:
        """The current declines of the sources reporting under ``identity`` (supervisor)."""
        return [
            DeclineReport.from_json(report["decline"])
            for report in self._source_reports(identity)
            if report.get("decline") is not None
        ]

    # -- drain (FLIP-147) ----------------------------------------------------------------------
    #
    # stop(drain=True) asks every source of the query to fix its end at what is available now;
    # each source's reader process answers with its DrainReport, and says when it has offered
    # everything up to that end.

    def _drain_path(self, identity: str) -> str:
        return os.path.join(self.directory, "drain", f"{identity}.json")

    def request_drain(self, identity: str) -> float:
        """Ask the sources of ``identity`` to drain (supervisor); returns the request's time."""
        at = time.time()
        write_atomically(self._drain_path(identity), json.dumps({"at": at}).encode())
        return at

    def drain_requested(self, identity: str) -> bool:
        """True once a drain of ``identity`` was requested (reader process, polled)."""
        return os.path.exists(self._drain_path(identity))

    def drains(self, identity: str) -> list[DrainReport | None]:
        """Each reporting source's drain state (None: it has not seen the request yet)."""
        return [
            None if report.get("drain") is None else DrainReport.from_json(report["drain"])
            for report in self._source_reports(identity)
        ]

    # -- the failure policy of unsupervised queries ------------------------------------------
    #
    # The session's spark.ckpt.* settings, written when install() runs and again as each query
    # starts (the listener's onQueryStarted runs before the query's first trigger), so a source
    # that no supervisor watches applies the settings in force when its query started.

    @property
    def policy_path(self) -> str:
        """The file holding the session's settings (processes that share it can see it)."""
        return os.path.join(self.directory, "policy.json")

    def write_policy(self, config: CkptConfig | None, error: str | None = None) -> None:
        """Record the session's settings, or why they are invalid (driver)."""
        body = {"values": None if config is None else config.values, "error": error}
        write_if_changed(self.policy_path, json.dumps(body, sort_keys=True).encode())

    def policy(self) -> CkptConfig | None:
        """The recorded settings (reader process, once per query run); None when unrecorded.

        Raises
        ------
        ConfigError
            When the session's settings were invalid as the query started.
        """
        try:
            with open(self.policy_path, encoding="utf-8") as handle:
                body = json.load(handle)
        except FileNotFoundError:
            return None
        if body.get("error"):
            raise ConfigError(str(body["error"]))
        values = body.get("values") or {}
        return CkptConfig.from_conf(values.get)

    # -- history of unsupervised queries ---------------------------------------------------
    #
    # A source in a query no supervisor watches does not know the query's checkpoint location,
    # so it leaves its history events here under its own identity; the listener moves them into
    # the query's history once it knows which query the identity serves.

    def record_pending(self, identity: str, event: HistoryEvent) -> None:
        """Leave a history event for the listener (reader process)."""
        name = f"{time.time_ns():020d}-{os.getpid()}.json"
        body = {"at": time.time(), **event.to_json()}
        write_atomically(
            os.path.join(self.directory, "pending", identity, name),
            json.dumps(body, sort_keys=True, default=str).encode(),
        )

    def take_pending(self, identity: str) -> list[HistoryEvent]:
        """The events left under ``identity``, oldest first, removed (listener's worker)."""
        values = _read_json_files(os.path.join(self.directory, "pending", identity), remove=True)
        return [e for e in map(event_from_json, values) if e is not None]

    def set_restore_point(self, identity: str, point: RestorePoint) -> None:
        """Record where the next attempt of ``identity`` resumes (supervisor, before a start)."""
        path = os.path.join(self.directory, "restore", f"{identity}.json")
        write_atomically(path, json.dumps(point.to_json(), sort_keys=True).encode())

    def restore_point(self, identity: str) -> RestorePoint | None:
        """Where the current attempt of ``identity`` resumed from (see :mod:`.restore`)."""
        path = os.path.join(self.directory, "restore", f"{identity}.json")
        try:
            with open(path, encoding="utf-8") as handle:
                value = json.load(handle)
        except FileNotFoundError:
            return None
        return RestorePoint.from_json(value)

    def clear_declines(self, identity: str) -> None:
        """Forget the reports of a previous attempt's readers (they are gone), and any drain."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._drain_path(identity))
        directory = os.path.join(self.directory, "sources", identity)
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(directory):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))


def _read_json_files(directory: str, *, remove: bool = False) -> list[Any]:
    """The JSON values of the ``*.json`` files in ``directory``, by name ([] when missing).

    A file that disappears meanwhile (its writer replaced or removed it) is skipped; with
    ``remove`` each file read is deleted.
    """
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    values = []
    for name in names:
        path = os.path.join(directory, name)
        with contextlib.suppress(FileNotFoundError, ValueError):
            with open(path, "rb") as handle:
                values.append(json.loads(handle.read()))
            if remove:
                os.unlink(path)
    return values
