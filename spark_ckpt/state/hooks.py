"""Checkpoint hooks (FLINK-6390's master hooks): driver code that takes part in checkpoints.

A :class:`CheckpointHook` is triggered when checkpoint N is taken and may return bytes; the bytes
are stored with checkpoint N in the query's checkpoint location (``spark_ckpt/hooks/N.json``, with
the hook's format version) and handed back to :meth:`CheckpointHook.restore` when the query
resumes from N. A hook that raises aborts checkpoint N.

In Spark the last moment the driver can still stop checkpoint N from completing is the sink's
pre-commit: Spark writes ``commits/N`` only after the sink's ``commit(N)`` returns, and that runs
in a separate driver-side process. So the 2PC sink of a supervised query asks the supervisor's
process, where the hooks live, to trigger them (:class:`HookChannel`, files in the control
plane's state directory) and waits for the answer before it makes N's manifest durable; a failed
hook makes the sink's commit raise, and batch N is re-run when the query restarts. Pure Python,
no Spark.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass

from spark_ckpt.errors import CheckpointHookError, StateFormatError
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint, numbered
from spark_ckpt.state.files import write_atomically
from spark_ckpt.state.registry import ControlState
from spark_ckpt.state.storage import Location

__all__ = ["CheckpointHook", "HookChannel", "HookStore", "restore_hooks", "trigger_hooks"]

_RETAIN = 100  # hook records kept, like Spark's spark.sql.streaming.minBatchesToRetain
_POLL = 0.01  # seconds between looks at the channel while a commit waits for its hooks


class CheckpointHook(abc.ABC):
    """Driver-side code called when a checkpoint is taken and when one is restored.

    Hooks run on the driver, in the process that called ``control.supervise(..., hooks=[...])``,
    on a thread of the supervisor: ``trigger`` once per attempt of each checkpoint, ``restore``
    once before each (re)start that resumes from a completed checkpoint.
    """

    identifier: str
    """A name unique among the query's hooks, stable across restarts (it keys the stored data)."""

    version: int = 1
    """Format version of the bytes :meth:`trigger` returns; stored next to them."""

    @abc.abstractmethod
    def trigger(self, checkpoint_id: int, timestamp: float) -> bytes | None:
        """Checkpoint ``checkpoint_id`` is being taken; return what to store with it, if anything.

        ``timestamp`` is the time of the trigger in seconds since the epoch. Raising aborts the
        checkpoint.
        """

    @abc.abstractmethod
    def restore(self, checkpoint_id: int, data: bytes | None) -> None:
        """The query resumes from ``checkpoint_id``; ``data`` is what :meth:`trigger` returned then.

        ``data`` is None when the hook stored nothing for that checkpoint (it returned None, or the
        checkpoint was taken without this hook).
        """

    def upgrade(self, data: bytes, version: int) -> bytes:
        """Convert ``data`` stored in format ``version`` to :attr:`version` (default: refuse)."""
        raise StateFormatError(
            f"stored data has format version {version} and this hook reads version {self.version}; "
            f"override upgrade() to convert it"
        )


@dataclass(frozen=True)
class HookRecord:
    """What the hooks stored with one checkpoint: ``identifier -> (version, bytes or None)``."""

    checkpoint_id: int
    timestamp: float
    data: dict[str, tuple[int, bytes | None]]

    def to_bytes(self) -> bytes:
        """Stable JSON (bytes as base64)."""
        hooks = {
            key: {
                "version": version,
                "data": None if blob is None else base64.b64encode(blob).decode("ascii"),
            }
            for key, (version, blob) in sorted(self.data.items())
        }
        body = {"checkpoint": self.checkpoint_id, "timestamp": self.timestamp, "hooks": hooks}
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> HookRecord:
        """Parse what :meth:`to_bytes` wrote."""
        body = json.loads(raw)
        data = {
            key: (
                int(value["version"]),
                None if value["data"] is None else base64.b64decode(value["data"]),
            )
            for key, value in body["hooks"].items()
        }
        return cls(int(body["checkpoint"]), float(body["timestamp"]), data)


class HookStore:
    """Hook records inside a checkpoint location (``spark_ckpt/hooks/<N>.json``)."""

    def __init__(self, checkpoint: SparkCheckpoint) -> None:
        self.directory = checkpoint.child("spark_ckpt", "hooks")

    def _object(self, checkpoint_id: int) -> Location:
        return self.directory.child(f"{checkpoint_id}.json")

    def write(self, record: HookRecord) -> None:
        """Durably store ``record`` (replacing an aborted attempt's) and drop very old ones.

        Written whole (one object): a reader sees the aborted attempt's record or this one.
        """
        self._object(record.checkpoint_id).write_bytes(record.to_bytes())
        for old in self.checkpoint_ids():
            if old <= record.checkpoint_id - _RETAIN:
                self._object(old).delete()

    def read(self, checkpoint_id: int) -> HookRecord | None:
        """The record of ``checkpoint_id``, or None."""
        data = self._object(checkpoint_id).read_bytes()
        return None if data is None else HookRecord.from_bytes(data)

    def checkpoint_ids(self) -> list[int]:
        """Checkpoints with a record, ascending."""
        return numbered(self.directory, ".json")


def trigger_hooks(
    hooks: list[CheckpointHook], store: HookStore, checkpoint_id: int, timestamp: float
) -> HookRecord:
    """Trigger every hook for ``checkpoint_id`` and store their data durably (driver).

    Raises
    ------
    CheckpointHookError
        When a hook raised (``io=False``) or its data could not be stored (``io=True``); then
        nothing is stored and the checkpoint must not complete.
    """
    data: dict[str, tuple[int, bytes | None]] = {}
    for hook in hooks:
        try:
            blob = hook.trigger(checkpoint_id, timestamp)
        except Exception as e:
            raise CheckpointHookError(
                hook.identifier, checkpoint_id, f"trigger raised {type(e).__name__}: {e}", io=False
            ) from e
        if blob is not None and not isinstance(blob, bytes | bytearray):
            raise CheckpointHookError(
                hook.identifier,
                checkpoint_id,
                f"trigger returned {type(blob).__name__}, expected bytes or None",
                io=False,
            )
        data[hook.identifier] = (hook.version, None if blob is None else bytes(blob))
    record = HookRecord(checkpoint_id, timestamp, data)
    try:
        store.write(record)
    except OSError as e:
        raise CheckpointHookError(
            ",".join(sorted(data)) or "-", checkpoint_id, f"storing the data failed: {e}", io=True
        ) from e
    return record


def restore_hooks(hooks: list[CheckpointHook], store: HookStore, checkpoint_id: int) -> None:
    """Hand each hook what it stored with ``checkpoint_id`` (driver, before a restart).

    Raises
    ------
    CheckpointHookError
        When the stored data cannot be read or converted, or ``restore`` raised: the query is
        not started from a checkpoint its hooks could not take up.
    """
    try:
        record = store.read(checkpoint_id)
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointHookError(
            "-", checkpoint_id, f"reading the hooks' data in {store.directory} failed: {e}", io=True
        ) from e
    stored = {} if record is None else record.data
    for hook in hooks:
        version, blob = stored.get(hook.identifier, (hook.version, None))
        try:
            if blob is not None and version != hook.version:
                blob = hook.upgrade(blob, version)
            hook.restore(checkpoint_id, blob)
        except Exception as e:
            raise CheckpointHookError(
                hook.identifier, checkpoint_id, f"restore failed: {type(e).__name__}: {e}", io=False
            ) from e


class HookChannel:
    """Trigger requests from a sink's commit process to the supervisor that owns the hooks.

    Files under the control plane's state directory, per checkpoint location (one query runs on
    a location at a time, and the sink is always told it): ``enabled`` (the supervisor has hooks;
    holds the wait limit), ``requests/<batch>-<token>`` from the sink and
    ``replies/<batch>-<token>`` from the supervisor. A sink started without the supervisor's
    ``install`` has no state directory, and one whose location no supervisor watches finds no
    ``enabled``: neither waits.
    """

    def __init__(self, state: ControlState, key: str) -> None:
        self.root = os.path.join(state.directory, "hooks", key)

    @classmethod
    def for_checkpoint(cls, state: ControlState, checkpoint_location: str) -> HookChannel:
        """The channel of the query on ``checkpoint_location``."""
        return cls(
            state, hashlib.sha256(Location(checkpoint_location).url.encode()).hexdigest()[:24]
        )

    # -- supervisor side ---------------------------------------------------------------------

    def enable(self, timeout: float) -> None:
        """Announce hooks for this query; its sink waits at most ``timeout`` seconds for them."""
        write_atomically(os.path.join(self.root, "enabled"), json.dumps(timeout).encode())

    def disable(self) -> None:
        """Withdraw the announcement (supervision ended); later commits do not wait."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.root, "enabled"))

    def requests(self) -> list[tuple[str, int, float]]:
        """Open requests as ``(name, batch id, requested at)``, oldest batch first."""
        directory = os.path.join(self.root, "requests")
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if name.startswith("."):
                continue
            with contextlib.suppress(FileNotFoundError, ValueError):
                with open(os.path.join(directory, name), encoding="utf-8") as handle:
                    requested_at = float(json.load(handle))
                found.append((name, int(name.split("-", 1)[0]), requested_at))
        return sorted(found, key=lambda r: (r[1], r[0]))

    def reply(self, name: str, error: CheckpointHookError | None) -> None:
        """Answer request ``name``: None when the hooks' data is durable, else the failure."""
        body: dict[str, object] = {"ok": error is None}
        if error is not None:
            body.update(message=error.detail, identifier=error.identifier, io=error.io)
        write_atomically(os.path.join(self.root, "replies", name), json.dumps(body).encode())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.root, "requests", name))

    # -- sink side (a commit process) --------------------------------------------------------

    def wait_limit(self) -> float | None:
        """How long a commit waits for the hooks; None when no supervisor has hooks here."""
        try:
            with open(os.path.join(self.root, "enabled"), encoding="utf-8") as handle:
                return float(json.load(handle))
        except FileNotFoundError:
            return None

    def trigger(self, batch_id: int, timeout: float) -> None:
        """Have the supervisor trigger its hooks for ``batch_id`` and wait for them (driver).

        Raises
        ------
        CheckpointHookError
            When a hook failed, or no answer came within ``timeout`` seconds.
        """
        name = f"{batch_id}-{uuid.uuid4().hex}"
        write_atomically(
            os.path.join(self.root, "requests", name), json.dumps(time.time()).encode()
        )
        reply_path = os.path.join(self.root, "replies", name)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(reply_path, encoding="utf-8") as handle:
                    body = json.load(handle)
                break
            except FileNotFoundError:
                if time.monotonic() > deadline:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.root, "requests", name))
                    raise CheckpointHookError(
                        "-",
                        batch_id,
                        f"the supervisor did not trigger the hooks within {timeout:g}s "
                        f"(spark.ckpt.checkpointTimeout); is the supervising driver alive?",
                        io=True,
                    ) from None
                time.sleep(_POLL)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(reply_path)
        if not body["ok"]:
            raise CheckpointHookError(
                body["identifier"],
                batch_id,
                f"checkpoint aborted: {body['message']}",
                io=bool(body["io"]),
            )
