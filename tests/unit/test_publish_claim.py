"""The advisory claim of a mirror batch's publish: who waits for whom, and never for the dead.

Claims are real files in a checkpoint location on local disk; the clock and the sleep of the
waiting loop are fakes, so each rule is shown without waiting.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_ckpt.sinks.manifest import ManifestStore
from spark_ckpt.sinks.publish_claim import CLAIM_WAIT, Claim, claim, release, wait_for_claimant
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.storage import Location

RUN = "11111111-0000-4000-8000-000000000001"


@pytest.fixture
def store(tmp_path: Path) -> ManifestStore:
    ckpt = Location(str(tmp_path / "ckpt"))
    ckpt.child("metadata").write_bytes(json.dumps({"id": "q"}).encode() + b"\n")
    return ManifestStore(SparkCheckpoint(ckpt))


def claim_file(store: ManifestStore, batch_id: int) -> Location:
    return store.root.child("publishing", str(batch_id))


def dead_pid() -> int:
    """The pid of a process of this host that has exited."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return int(child.stdout)


class FakeTime:
    """A clock that only moves when the waiter sleeps; ``on_sleep`` runs at each sleep."""

    def __init__(self, on_sleep: list[object] | None = None) -> None:
        self.now = time.time()  # claims made by claim() carry the real time
        self.sleeps = 0
        self.actions = on_sleep or []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds
        if self.actions:
            action = self.actions.pop(0)
            if callable(action):
                action()


def test_the_first_claim_of_a_batch_wins(store: ManifestStore) -> None:
    assert claim(store, 3, RUN)
    assert not claim(store, 3, None), "the second publisher of batch 3 does not hold it"
    assert claim(store, 4, RUN), "another batch is another claim"
    assert claim(store, 5, None), "recovery (a commit process building its writer) claims too"
    found = Claim.from_bytes(claim_file(store, 3).read_bytes() or b"")
    assert found is not None
    assert (found.run, found.host, found.pid) == (RUN, socket.gethostname(), os.getpid())
    release(store, 3)
    assert not claim_file(store, 3).exists()
    release(store, 3)  # releasing twice (the claimant, then the publisher's tidy) is fine


def test_only_a_live_claimant_is_waited_for() -> None:
    host, now = socket.gethostname(), 5_000.0
    assert Claim(RUN, host, os.getpid(), now - 1).is_live(now)
    assert not Claim(RUN, host, os.getpid(), now - CLAIM_WAIT).is_live(now), "stale"
    assert not Claim(RUN, host, os.getpid(), now + 5).is_live(now), "from the future: stale"
    assert not Claim(RUN, host, dead_pid(), now - 1).is_live(now), "its process exited"
    assert Claim(RUN, "another-host", 1, now - 1).is_live(now), "cannot tell: wait"
    assert Claim.from_bytes(b"{not json") is None
    assert Claim.from_bytes(b'{"run": "r"}') is None


def test_a_waiter_returns_once_the_claimant_released_the_published_batch(
    store: ManifestStore,
) -> None:
    assert claim(store, 7, RUN)
    published = {"done": False}

    def claimant_finishes() -> None:
        published["done"] = True
        release(store, 7)

    fake = FakeTime([None, None, claimant_finishes])
    assert wait_for_claimant(store, 7, lambda: published["done"], fake.clock, fake.sleep)
    assert fake.sleeps == 3, "it polled the claim until it went, then looked at the table once"


def test_a_claimant_that_released_without_publishing_leaves_the_batch_to_the_waiter(
    store: ManifestStore,
) -> None:
    assert claim(store, 7, RUN)
    fake = FakeTime([lambda: release(store, 7)])  # its apply failed: the finally released it
    assert not wait_for_claimant(store, 7, lambda: False, fake.clock, fake.sleep)


def test_nobody_waits_for_a_dead_or_stale_claimant(store: ManifestStore) -> None:
    claim_file(store, 8).write_bytes(Claim(RUN, socket.gethostname(), dead_pid(), 0).to_bytes())
    fake = FakeTime()
    fake.now = 10.0
    assert not wait_for_claimant(store, 8, lambda: False, fake.clock, fake.sleep)
    claim_file(store, 9).write_bytes(Claim(RUN, "another-host", 1, 0).to_bytes())
    fake.now = CLAIM_WAIT + 1
    assert wait_for_claimant(store, 9, lambda: True, fake.clock, fake.sleep)
    assert fake.sleeps == 0


def test_a_claimant_that_never_finishes_is_waited_for_a_bounded_time(
    store: ManifestStore, caplog: pytest.LogCaptureFixture
) -> None:
    assert claim(store, 10, RUN)
    fake = FakeTime()
    fake.now = json.loads(claim_file(store, 10).read_bytes() or b"{}")["at"]
    assert not wait_for_claimant(store, 10, lambda: False, fake.clock, fake.sleep)
    assert fake.now - json.loads(claim_file(store, 10).read_bytes() or b"")["at"] >= CLAIM_WAIT
    assert "did not publish it within" in caplog.text
