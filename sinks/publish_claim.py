"""Who is publishing a mirror batch: an advisory claim, so that a second publisher waits.

Two processes of one query run publish batch N: the control plane's listener when checkpoint N
completes, and the commit of batch N + 1, which must see N published before it plans. Both are
safe (:mod:`.publisher`: the Delta log decides, ``txn`` makes the loser's work a no-op), but a
mirror's apply of a large table costs seconds of CPU, and two applies of one batch at once on the
same cores took twice that: measured at 20M rows, the listener and the commit process each spent
3.3-4.3 s on every batch, side by side.

So the first publisher of a mirror batch creates ``delta_2pc/publishing/<N>`` (only if absent)
naming its run, host and process, and deletes it when done. Another publisher that finds the
claim waits, up to :data:`CLAIM_WAIT` seconds, for the claim to go, then carries on: after N
when it was published, or publishing N itself. (The commit process publishes as recovery, for
no run: Spark builds the writer anew in every commit process, and the writer publishes what is
complete as it is built.) The claim never decides anything; it only saves work:

- a claim of a process on this host that no longer runs, or older than the wait, is not waited
  for: a killed publisher never blocks the next one (a claimant on another host that died is
  waited for until its claim is :data:`CLAIM_WAIT` old);
- where a file cannot be created only if absent (stores other than local disks and S3), nobody
  claims and publishers run side by side as before;
- the publisher of N deletes any claim of N left behind (:func:`release`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from spark_ckpt.errors import StorageError
from spark_ckpt.state.storage import Location

from .manifest import ManifestStore

__all__ = ["CLAIM_WAIT", "Claim", "claim", "release", "wait_for_claimant"]

_log = logging.getLogger(__name__)

CLAIM_WAIT = 120.0
"""Seconds a publisher waits at most for another's claimed publish of the same batch: longer
than a large mirror batch's apply, short enough that a claimant stuck without dying costs one
wait, after which the batch is published by the waiter."""

_POLL = 0.05
"""Seconds between looks at the claim while waiting."""


@dataclass(frozen=True)
class Claim:
    """A publisher's claim of a batch: which run, where, since when."""

    run: str
    host: str
    pid: int
    at: float

    def to_bytes(self) -> bytes:
        """The claim file's content."""
        value = {"run": self.run, "host": self.host, "pid": self.pid, "at": self.at}
        return json.dumps(value).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Claim | None:
        """Parse :meth:`to_bytes` output; None when it is not a claim (a torn or foreign file)."""
        try:
            value = json.loads(data)
            return cls(str(value["run"]), str(value["host"]), int(value["pid"]), float(value["at"]))
        except (ValueError, KeyError, TypeError):
            return None

    def is_live(self, now: float) -> bool:
        """Whether another publisher should wait for this claimant at ``now``.

        Within :data:`CLAIM_WAIT` of the claim, unless the claimant was a process of this host
        that has exited.
        """
        if not 0 <= now - self.at < CLAIM_WAIT:
            return False
        if self.host != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # another user's process with that pid: assume it is the claimant
        return True


def _claim_file(store: ManifestStore, batch_id: int) -> Location:
    return store.root.child("publishing", str(batch_id))


def claim(store: ManifestStore, batch_id: int, run: str | None) -> bool:
    """Claim the publish of ``batch_id``; True when this process holds the claim.

    Runs on the driver, in a publisher, once per mirror batch it is about to apply. ``run``
    (None: recovery) is recorded for whoever reads the claim. False where claims cannot be
    created only if absent, and when another publisher claimed first.
    """
    target = _claim_file(store, batch_id)
    if not target.creates_exclusively:
        return False
    mine = Claim(run or "", socket.gethostname(), os.getpid(), time.time())
    try:
        return target.create_bytes(mine.to_bytes())
    except StorageError as e:
        _log.debug("cannot claim the publish of batch %d: %s", batch_id, e)
        return False


def release(store: ManifestStore, batch_id: int) -> None:
    """Delete the claim of ``batch_id`` (driver, by its claimant or by whoever published it)."""
    try:
        _claim_file(store, batch_id).delete()
    except StorageError as e:  # a claim left behind is only waited for until it is stale
        _log.debug("cannot delete the claim of batch %d: %s", batch_id, e)


def wait_for_claimant(
    store: ManifestStore,
    batch_id: int,
    published: Callable[[], bool],
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Wait while a live claimant of ``batch_id`` publishes it; True when it was published.

    Runs on the driver, in a publisher that could not claim the batch. ``published`` says
    whether the table holds the batch; it is asked once the claim is gone (its claimant releases
    it once the batch is in the table), not live (:meth:`Claim.is_live`) or the wait has lasted
    :data:`CLAIM_WAIT`. False: the caller publishes the batch itself. Only the claim
    file is read meanwhile: loading a large table's snapshot again and again would take CPU
    from the claimant.
    """
    target = _claim_file(store, batch_id)
    started = clock()
    while clock() - started < CLAIM_WAIT:
        data = target.read_bytes()
        found = None if data is None else Claim.from_bytes(data)
        if found is None or not found.is_live(clock()):
            return published()
        sleep(_POLL)
    _log.warning(
        "batch %d: its claimant (%s) did not publish it within %.0f s; publishing it here",
        batch_id,
        target.url,
        CLAIM_WAIT,
    )
    return published()
