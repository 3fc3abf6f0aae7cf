"""Fault injection for crash tests: kill the whole driver at a named protocol point, or stall.

Crash tests set ``SPARK_CKPT_FAULT=<point>:<batch>`` (several separated by commas) in the
environment of a driver process started in its own session. When any process of that session
(the driver, an executor task, a sink commit process; Spark puts its Python workers in process
groups of their own, but not in sessions of their own) reaches the named point for that batch, it
SIGKILLs every process of the session: the driver, its JVM and every Python worker die at once,
as in a machine crash. Unset (always, outside crash tests), :func:`crash_point` is a set lookup.

``SPARK_CKPT_STALL=<point>:<batch>:<seconds>`` makes the first attempt of a task that reaches the
point sleep instead (:func:`stall_point`): a test then knows a batch is in flight there, and can
kill the executor running it, as a lost machine would.
"""

from __future__ import annotations

import os
import signal
import time

from spark_ckpt.errors import ConfigError

__all__ = ["POINTS", "crash_point", "stall_point"]

POINTS = (
    "after_staging",  # an executor staged its files; no manifest yet
    "after_manifest",  # N's manifest is durable; Spark has not written commits/N
    "before_publish",  # commits/N exists; a publisher is about to commit N to Delta
    "during_publish",  # N's Delta version is written; the publisher has not returned
    # a restart's restore or a re-run deletes an aborted attempt's files (one is gone)
    "during_abort",
    "during_snapshot",  # postgres: N+1 tables of the snapshot are spilled, the rest not ("batch" N)
    "during_chunk_read",  # postgres incremental: chunk N of a table is read, not yet spilled
    "after_mirror_plan",  # mirror mode: N's folded changes are staged; no manifest yet
    "during_mirror",  # mirror mode: a mirror table holds N, the index and the change log not yet
    # mirror mode: N finishes a rebuild, whose copy is staged in the table, not yet committed
    "during_rebuild",
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


def _stalls() -> dict[tuple[str, int], float]:
    spec = os.environ.get("SPARK_CKPT_STALL", "")
    stalls = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        point, batch, seconds = [*item.split(":"), "", ""][:3]
        if point not in POINTS or not batch.isdigit() or not seconds.isdigit():
            raise ConfigError(
                f"SPARK_CKPT_STALL has the invalid entry {item!r}: expected "
                f"<point>:<batch>:<seconds> with point one of {', '.join(POINTS)}"
            )
        stalls[(point, int(batch))] = float(seconds)
    return stalls


_STALLS = _stalls()


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


def stall_point(point: str, batch_id: int, attempt: int) -> None:
    """Sleep at ``point`` of ``batch_id`` if a stall is armed there (first task attempt only)."""
    seconds = _STALLS.get((point, batch_id))
    if seconds is not None and attempt == 0:
        time.sleep(seconds)
