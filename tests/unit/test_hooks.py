"""Checkpoint hooks (FLINK-6390): trigger, store with checkpoint N, restore N; the sink channel."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from spark_ckpt.errors import CheckpointHookError
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.hooks import (
    CheckpointHook,
    HookChannel,
    HookStore,
    restore_hooks,
    trigger_hooks,
)
from spark_ckpt.state.registry import ControlState


class Recorder(CheckpointHook):
    """Returns ``<name>@<id>`` and records what it was handed back."""

    def __init__(self, name: str, *, fail: bool = False, returns: object = "default") -> None:
        self.identifier = name
        self.fail = fail
        self.returns = returns
        self.restored: list[tuple[int, bytes | None]] = []

    def trigger(self, checkpoint_id: int, timestamp: float) -> bytes | None:
        if self.fail:
            raise RuntimeError("external system unavailable")
        if self.returns != "default":
            return self.returns  # type: ignore[return-value]  # deliberately wrong in one test
        return f"{self.identifier}@{checkpoint_id}".encode()

    def restore(self, checkpoint_id: int, data: bytes | None) -> None:
        self.restored.append((checkpoint_id, data))


class Versioned(Recorder):
    version = 2

    def upgrade(self, data: bytes, version: int) -> bytes:
        return b"v" + str(version).encode() + b":" + data


def store(tmp_path: Path) -> HookStore:
    return HookStore(SparkCheckpoint(str(tmp_path / "ckpt")))


def test_data_stored_with_n_is_handed_back_when_n_is_restored(tmp_path: Path) -> None:
    hooks = [Recorder("a"), Recorder("b", returns=None)]
    for checkpoint in (3, 4):
        trigger_hooks(hooks, store(tmp_path), checkpoint, 1000.0 + checkpoint)
    fresh = [Recorder("a"), Recorder("b")]
    restore_hooks(fresh, store(tmp_path), 3)
    assert fresh[0].restored == [(3, b"a@3")]
    assert fresh[1].restored == [(3, None)]  # it stored nothing with checkpoint 3


def test_a_checkpoint_without_a_record_restores_none(tmp_path: Path) -> None:
    hook = Recorder("a")
    restore_hooks([hook], store(tmp_path), 7)
    assert hook.restored == [(7, None)]


def test_a_raising_hook_aborts_the_checkpoint_and_stores_nothing(tmp_path: Path) -> None:
    with pytest.raises(CheckpointHookError) as info:
        trigger_hooks([Recorder("ok"), Recorder("bad", fail=True)], store(tmp_path), 5, 0.0)
    assert info.value.identifier == "bad"
    assert info.value.io is False
    assert "external system unavailable" in str(info.value)
    assert store(tmp_path).read(5) is None


def test_a_hook_returning_something_else_than_bytes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointHookError, match="returned str, expected bytes"):
        trigger_hooks([Recorder("s", returns="text")], store(tmp_path), 1, 0.0)


def test_storing_failure_is_an_io_failure(tmp_path: Path) -> None:
    (tmp_path / "ckpt" / "spark_ckpt").mkdir(parents=True)
    (tmp_path / "ckpt" / "spark_ckpt" / "hooks").write_text("a file where a directory belongs")
    with pytest.raises(CheckpointHookError) as info:
        trigger_hooks([Recorder("a")], store(tmp_path), 1, 0.0)
    assert info.value.io is True


def test_older_format_versions_are_upgraded_or_refused(tmp_path: Path) -> None:
    trigger_hooks([Recorder("a")], store(tmp_path), 2, 0.0)  # version 1
    upgraded = Versioned("a")
    restore_hooks([upgraded], store(tmp_path), 2)
    assert upgraded.restored == [(2, b"v1:a@2")]

    class Strict(Recorder):
        version = 3

    with pytest.raises(CheckpointHookError, match="format version 1 and this hook reads version 3"):
        restore_hooks([Strict("a")], store(tmp_path), 2)


def test_old_records_are_dropped_after_retention(tmp_path: Path) -> None:
    hooks = [Recorder("a")]
    for checkpoint in range(105):
        trigger_hooks(hooks, store(tmp_path), checkpoint, 0.0)
    kept = store(tmp_path).checkpoint_ids()
    assert kept[0] == 5
    assert kept[-1] == 104


def _serve_once(channel: HookChannel, error: CheckpointHookError | None) -> threading.Thread:
    def serve() -> None:
        for _ in range(500):
            requests = channel.requests()
            if requests:
                channel.reply(requests[0][0], error)
                return
            threading.Event().wait(0.01)

    thread = threading.Thread(target=serve)
    thread.start()
    return thread


def test_channel_round_trip_and_failure(tmp_path: Path) -> None:
    state = ControlState(str(tmp_path / "state"))
    channel = HookChannel(state, "q-1")
    assert channel.wait_limit() is None
    channel.enable(30.0)
    assert HookChannel(state, "q-1").wait_limit() == 30.0
    assert HookChannel(state, "q-2").wait_limit() is None  # identities are separate

    server = _serve_once(channel, None)
    channel.trigger(4, timeout=5)
    server.join(5)

    failure = CheckpointHookError("h", 5, "boom", io=False)
    server = _serve_once(channel, failure)
    with pytest.raises(CheckpointHookError, match="checkpoint aborted: boom") as info:
        channel.trigger(5, timeout=5)
    server.join(5)
    assert info.value.identifier == "h"
    assert channel.requests() == []
    channel.disable()
    assert channel.wait_limit() is None


def test_channel_without_an_answer_times_out(tmp_path: Path) -> None:
    channel = HookChannel(ControlState(str(tmp_path / "state")), "q")
    with pytest.raises(CheckpointHookError, match=r"did not trigger the hooks within 0\.2s"):
        channel.trigger(1, timeout=0.2)
    assert channel.requests() == []  # the request is withdrawn
