"""The control plane's ``StreamingQueryListener``.

Listener callbacks run on Spark's listener bus (a Py4J callback thread in classic mode) and must
stay short, so every callback only hands work to one background thread. That thread runs the
*completion hooks* of the components a query registered (see :mod:`spark_ckpt.state.registry`):
after the progress event of batch N (checkpoint N is complete) and after the query terminated
(publish everything complete: no tail left behind). Hooks are found through the entry-point group
``spark_ckpt.completion_hooks``, so this module imports no source or sink.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from importlib.metadata import entry_points
from typing import Any, Protocol

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from spark_ckpt.state.registry import ControlState, Registration

__all__ = ["HOOK_GROUP", "CheckpointListener", "CompletionHook", "Watcher", "load_hooks"]

HOOK_GROUP = "spark_ckpt.completion_hooks"
"""Entry-point group of completion hooks, keyed by the registering component's format name."""

CompletionHook = Callable[[Registration, "int | None", "str | None"], None]
"""``hook(registration, batch_id, run_id)``: checkpoint ``batch_id`` of run ``run_id`` completed
(``batch_id`` None: the run ended)."""

_log = logging.getLogger(__name__)


class Watcher(Protocol):
    """Who wants to hear about one query's checkpoints (a supervised query)."""

    def checkpoint_completed(self, progress: dict[str, Any]) -> None:
        """A progress event in JSON form: its ``batchId`` completed (listener bus; be quick)."""

    def publish_failed(self, batch_id: int | None, error: BaseException) -> None:
        """A completion hook failed after ``batch_id`` (None: at termination); worker thread."""


def load_hooks() -> dict[str, CompletionHook]:
    """The installed completion hooks by format name."""
    return {entry.name: entry.load() for entry in entry_points(group=HOOK_GROUP)}


class CheckpointListener(StreamingQueryListener):
    """Runs completion hooks after each completed checkpoint and after termination.

    Parameters
    ----------
    state
        Where components register the queries they serve.
    hooks
        Completion hooks by format name.
    """

    def __init__(self, state: ControlState, hooks: dict[str, CompletionHook]) -> None:
        self._state = state
        self._hooks = hooks
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-ckpt-hooks")
        self._lock = threading.Lock()
        self._finished: dict[str, threading.Event] = {}
        self.errors: list[tuple[str, int | None, BaseException]] = []
        """Hook failures as ``(query id, batch id, error)``, newest last."""
        self._final_errors: dict[str, BaseException] = {}
        self._watchers: dict[str, Watcher] = {}

    def watch(self, query_id: str, watcher: Watcher) -> None:
        """Tell ``watcher`` about ``query_id``'s completed checkpoints and failed hooks."""
        with self._lock:
            self._watchers[query_id] = watcher

    def final_error(self, query_id: str) -> BaseException | None:
        """The failure of ``query_id``'s termination hooks (its final publish), if any."""
        with self._lock:
            return self._final_errors.get(query_id)

    def finished(self, query_id: str) -> threading.Event:
        """Set once the termination hooks of ``query_id`` have run."""
        with self._lock:
            return self._finished.setdefault(query_id, threading.Event())

    def _run_hooks(self, query_id: str, batch_id: int | None, run_id: str | None) -> None:
        for registration in self._state.registrations(query_id):
            hook = self._hooks.get(registration.kind)
            if hook is None:
                continue
            try:
                hook(registration, batch_id, run_id)
            except Exception as e:  # a failed hook must not stop the listener thread
                _log.exception(
                    "completion hook of %s failed for query %s batch %s",
                    registration.kind,
                    query_id,
                    batch_id,
                )
                self.errors.append((query_id, batch_id, e))
                with self._lock:
                    if batch_id is None:
                        self._final_errors[query_id] = e
                    watcher = self._watchers.get(query_id)
                if watcher is not None:
                    watcher.publish_failed(batch_id, e)

    def _submit(self, query_id: str, batch_id: int | None, run_id: str | None) -> Future[None]:
        future = self._worker.submit(self._run_hooks, query_id, batch_id, run_id)
        if batch_id is None:
            future.add_done_callback(lambda _: self.finished(query_id).set())
        return future

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        """A query (re)started: arm its termination signal (query thread; keep it short)."""
        with self._lock:
            self._finished[str(event.id)] = threading.Event()
            self._final_errors.pop(str(event.id), None)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        """Checkpoint ``batchId`` completed: run the hooks in the background (listener bus)."""
        query_id, batch_id = str(event.progress.id), int(event.progress.batchId)
        with self._lock:
            watcher = self._watchers.get(query_id)
        if watcher is not None:
            watcher.checkpoint_completed(json.loads(event.progress.json))
        self._submit(query_id, batch_id, str(event.progress.runId))

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        """Nothing to do on idle triggers."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        """The query ended: run the hooks for everything complete (listener bus)."""
        self._submit(str(event.id), None, str(event.runId))
