"""Fault injection for crash tests: kill the whole driver at a named protocol point.

Crash tests set ``SPARK_CKPT_FAULT=<point>:<batch>`` (several separated by commas) in the
environment of a driver process started in its own session. When any process of that session
(the driver, an executor task, a sink commit process; Spark puts its Python workers in process
groups of their own, but not in sessions of their own) reaches the named point for that batch, it
SIGKILLs every process of the session: the driver, its JVM and every Python worker die at once,
as in a machine crash. Unset (always, outside crash tests), :func:`crash_point` is a set lookup.
"""

from __future__ import annotations

import os
import signal

from spark_ckpt.errors import ConfigError

__all__ = ["POINTS", "crash_point"]

POINTS = (
    "after_staging",  # an executor staged its files; no manifest yet
    "after_manifest",  # N's manifest is durable; Spark has not written commits/N
    "before_publish",  # commits/N exists; a publisher is about to commit N to Delta
    "during_publish",  # N's Delta version is written; the publisher has not returned
    "during_abort",  # a re-run is deleting an aborted attempt's files (one is gone)
    "during_snapshot",  # postgres: N+1 tables of the snapshot are spilled, the rest not ("batch" N)
)


def _armed() -> set[tuple[str, int]]:
    spec = os.environ.get("SPARK_CKPT_FAULT", "")
    armed = set()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, _, batch = item.partition(":")
        if point not in POINTS or not batch.isdigit():
            raise ConfigError(
                f"SPARK_CKPT_FAULT has the invalid entry {item!r}: expected <point>:<batch> with "
                f"point one of {', '.join(POINTS)}"
            )
        armed.add((point, int(batch)))
    return armed


_ARMED = _armed()


def _kill_session() -> None:
    session = os.getsid(0)
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.getsid(int(entry)) == session:
                os.kill(int(entry), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    os.kill(me, signal.SIGKILL)


def crash_point(point: str, batch_id: int) -> None:
    """SIGKILL the whole session if ``point`` is armed for ``batch_id`` (anywhere, any time)."""
    if (point, batch_id) in _ARMED:
        _kill_session()
