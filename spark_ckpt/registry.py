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

import json
import os
from dataclasses import dataclass
from typing import Any

from spark_ckpt.files import write_atomically

__all__ = ["ControlState", "Registration"]


@dataclass(frozen=True)
class Registration:
    """A data-plane component serving one query.

    Attributes
    ----------
    kind
        The component's format name (``delta-2pc``); selects its completion hook.
    query_id
        The query's id.
    settings
        What the hook needs (for the sink: ``checkpointLocation`` and ``path``).
    """

    kind: str
    query_id: str
    settings: dict[str, Any]


@dataclass(frozen=True)
class ControlState:
    """The control plane's driver-local state directory (picklable, travels with classes)."""

    directory: str

    def _query_dir(self, query_id: str) -> str:
        return os.path.join(self.directory, "queries", query_id)

    def register(self, registration: Registration) -> None:
        """Record a registration (idempotent; cheap when it is already there)."""
        path = os.path.join(self._query_dir(registration.query_id), f"{registration.kind}.json")
        body = json.dumps(
            {"kind": registration.kind, "settings": registration.settings}, sort_keys=True
        ).encode()
        try:
            with open(path, "rb") as handle:
                if handle.read() == body:
                    return
        except FileNotFoundError:
            pass
        write_atomically(path, body)

    def registrations(self, query_id: str) -> list[Registration]:
        """The registrations for ``query_id`` (none when it registered nothing)."""
        directory = self._query_dir(query_id)
        try:
            names = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if not name.endswith(".json"):
                continue
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                body = json.load(handle)
            found.append(Registration(body["kind"], query_id, body["settings"]))
        return found
