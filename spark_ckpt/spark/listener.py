"""The control plane's ``StreamingQueryListener``.

Listener callbacks run on Spark's listener bus (a Py4J callback thread in classic mode) and must
stay short, so every callback only hands work to one background thread. That thread runs the
*completion hooks* of the components a query registered (see :mod:`spark_ckpt.state.registry`):
after the progress event of batch N (checkpoint N is complete) and after the query terminated
(publish everything complete: no tail left behind). Hooks are found through the entry-point group
``spark_ckpt.completion_hooks``, so this module imports no source or sink.

As each query starts, the listener can also restore it (``restore``): an unsupervised query
restarted on its checkpoint gets the restore notification the supervisor gives its attempts. A
sink registers only when it commits a batch, so without this a restart that runs no batch (a
bounded run with nothing new to read) would never publish the batch a killed driver completed
but did not publish.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import re
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

from pyspark.sql.streaming.listener import (
    JStreamingQueryListener,
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from spark_ckpt.model.events import (
    CompletedEvent,
    DeclineEvent,
    FailureEvent,
    HistoryEvent,
)
from spark_ckpt.model.failures import FailureReason
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.state.registry import ControlState, Registration

if TYPE_CHECKING:
    from py4j.java_gateway import JavaObject

    from spark_ckpt.spark.metrics import MetricsExporter

__all__ = [
    "HOOK_GROUP",
    "CheckpointListener",
    "CompletionHook",
    "JsonProgressBridge",
    "JsonProgressListener",
    "Watcher",
    "load_hooks",
]

HOOK_GROUP = "spark_ckpt.completion_hooks"
"""Entry-point group of completion hooks, keyed by the registering component's format name."""

CompletionHook = Callable[[Registration, "int | None", "str | None"], None]
"""``hook(registration, batch_id, run_id)``: checkpoint ``batch_id`` of run ``run_id`` completed
(``batch_id`` None: the run ended)."""

_log = logging.getLogger(__name__)
_POLICY_SOURCE = re.compile(r"Source (query-[0-9a-f]{12})")


class Watcher(Protocol):
    """Who wants to hear about one query's checkpoints (a supervised query)."""

    def checkpoint_completed(self, progress: dict[str, Any]) -> None:
        """A progress event in JSON form: its ``batchId`` completed (listener bus; be quick)."""

    def publish_failed(self, batch_id: int | None, error: BaseException) -> None:
        """A completion hook failed after ``batch_id`` (None: at termination); worker thread."""


def _json(value: object) -> Any:
    """An offset in a progress event: JSON text (or already parsed)."""
    return json.loads(value) if isinstance(value, str) else value


def _shifted(event: HistoryEvent, shift: int) -> HistoryEvent:
    """``event`` charged to Spark's batch id instead of the source's own checkpoint id."""
    if shift and isinstance(event, DeclineEvent | FailureEvent) and event.checkpoint is not None:
        return dataclasses.replace(event, checkpoint=event.checkpoint + shift)
    return event


def load_hooks() -> dict[str, CompletionHook]:
    """The installed completion hooks by format name."""
    return {entry.name: entry.load() for entry in entry_points(group=HOOK_GROUP)}


class JsonProgressBridge(JStreamingQueryListener):
    """Spark's Python listener bridge, reading each progress event as one JSON document.

    pyspark's bridge converts a progress event field by field (``fromJObject``): a Py4J call
    per field and per element, and each iteration over one of its Java collections (the
    durations, each source's metrics, the observed metrics) ends in a ``Py4JError`` that pyspark
    converts to a Python exception by asking the JVM about ten ``is_instance_of`` questions,
    each resolving ``py4j.reflection.TypeUtil`` by class lookups that fail through every jar of
    the driver's class path. ``bench/listener_cost.py`` measures both conversions of the same
    events side by side. Here the event costs one call, the progress's ``json()``, parsed the
    way Spark Connect's client reads the same events (``StreamingQueryProgress.fromJson``).
    Started, idle and terminated events carry no collections and keep pyspark's conversion.

    Runs on the driver, on Spark's listener bus thread, once per progress event.
    """

    def onQueryProgress(self, jevent: JavaObject) -> None:
        """Hand the listener the event, parsed from its JSON (listener bus, each batch)."""
        progress = json.loads(jevent.progress().json())
        self.pylistener.onQueryProgress(QueryProgressEvent.fromJson({"progress": progress}))


class JsonProgressListener(StreamingQueryListener):
    """A ``StreamingQueryListener`` whose progress events come through :class:`JsonProgressBridge`.

    Subclasses implement the ``on*`` callbacks as for pyspark's base class.
    """

    _bridge: JavaObject | None = None

    @property
    def _jlistener(self) -> JavaObject:
        """The JVM side of this listener, built on :class:`JsonProgressBridge` (driver, once).

        pyspark's ``addListener`` registers what this property returns; pyspark's own builds
        the same wrapper around its field-by-field bridge.
        """
        if self._bridge is None:
            from pyspark import SparkContext

            jvm = SparkContext._jvm
            assert jvm is not None, "a listener is added to a classic session's JVM"
            self._bridge = jvm.PythonStreamingQueryListenerWrapper(JsonProgressBridge(self))
        return self._bridge


class CheckpointListener(JsonProgressListener):
    """Runs completion hooks after each completed checkpoint and after termination.

    Parameters
    ----------
    state
        Where components register the queries they serve.
    hooks
        Completion hooks by format name.
    on_start
        Called as each query starts, before its first trigger (records the session's policy).
    restore
        Called with the query id as each query starts, before its first trigger: restores the
        query's checkpoint (publishes what its last run completed). Its failure does not stop
        the start; it is retried once the run ended, and if it fails then too, it is the run's
        final error.
    """

    def __init__(
        self,
        state: ControlState,
        hooks: dict[str, CompletionHook],
        on_start: Callable[[], None] | None = None,
        restore: Callable[[str], None] | None = None,
    ) -> None:
        self._state = state
        self._on_start = on_start
        self._restore = restore
        self._restore_failed: set[str] = set()
        # Restores never overlap, and each query's newest run is known: a retry at the end of
        # a run must not discard what a later run of the same query (started before this
        # run's termination event arrived) is staging.
        self._restoring = threading.Lock()
        self._newest_run: dict[str, str] = {}
        self._hooks = hooks
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-ckpt-hooks")
        self._lock = threading.Lock()
        self._finished: dict[str, threading.Event] = {}
        self.errors: list[tuple[str, int | None, BaseException]] = []
        """Hook failures as ``(query id, batch id, error)``, newest last."""
        self._final_errors: dict[str, BaseException] = {}
        self._watchers: dict[str, Watcher] = {}
        # Unsupervised queries: the sources' identities and how their checkpoint ids map to
        # Spark's batch ids (learnt from progress events; only the worker thread touches it).
        self._sources: dict[str, dict[str, int]] = {}
        self.metrics: MetricsExporter | None = None
        """The Prometheus exporter told about query starts, ends and names (when serving)."""
        # Queries whose history the exporter knows, with that exporter (worker thread).
        self._bound: dict[str, MetricsExporter] = {}
        self._names: dict[str, str | None] = {}  # query id -> name, from start events

    def watch(self, query_id: str, watcher: Watcher) -> None:
        """Tell ``watcher`` about ``query_id``'s completed checkpoints and failed hooks."""
        with self._lock:
            self._watchers[query_id] = watcher

    def final_error(self, run_id: str) -> BaseException | None:
        """The failure of run ``run_id``'s termination hooks (its final publish), if any."""
        with self._lock:
            return self._final_errors.get(run_id)

    def finished(self, run_id: str) -> threading.Event:
        """Set once the termination hooks of run ``run_id`` (``StreamingQuery.runId``) have run.

        Keyed by run, not by query: every run of a query on one checkpoint has the same id,
        and Spark delivers a run's start to listeners synchronously but its termination
        through the asynchronous listener bus, so a stopped run's termination can arrive
        after the next run of the same query started.
        """
        with self._lock:
            return self._finished.setdefault(run_id, threading.Event())

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
                    if batch_id is None and run_id is not None:
                        self._final_errors[run_id] = e
                    watcher = self._watchers.get(query_id)
                if watcher is not None:
                    watcher.publish_failed(batch_id, e)

    def _restore_again(self, query_id: str, run_id: str) -> None:
        """Retry the restore that failed as run ``run_id`` started (worker, once it ended)."""
        with self._lock:
            if run_id not in self._restore_failed:
                return
            self._restore_failed.discard(run_id)
        assert self._restore is not None
        with self._restoring:
            if self._newest_run.get(query_id) != run_id:
                return  # a later run restored the query as it started
            try:
                self._restore(query_id)
            except Exception as e:
                _log.exception("restoring query %s failed again after its run ended", query_id)
                self.errors.append((query_id, None, e))
                with self._lock:
                    self._final_errors.setdefault(run_id, e)

    def _submit(self, query_id: str, batch_id: int | None, run_id: str | None) -> Future[None]:
        if batch_id is None and run_id is not None:
            self._worker.submit(self._restore_again, query_id, run_id)
        future = self._worker.submit(self._run_hooks, query_id, batch_id, run_id)
        if batch_id is None and run_id is not None:
            # The signal of the run that ended: a later run of the same query (same checkpoint,
            # same id) has a signal of its own, which this run's final publish never sets.
            done = self.finished(run_id)
            future.add_done_callback(lambda _: done.set())
        return future

    # -- history of queries no supervisor watches (worker thread) ----------------------------

    def _history(self, query_id: str) -> HistoryLog | None:
        """The history of ``query_id``'s checkpoint location, when a component told where."""
        for registration in self._state.registrations(query_id):
            if registration.checkpoint_location:
                return HistoryLog(registration.checkpoint())
        return None

    def _learn_sources(self, query_id: str, progress: dict[str, Any]) -> None:
        """Remember each policing source's identity and its checkpoint -> batch id shift."""
        known = self._sources.setdefault(query_id, {})
        for source in progress.get("sources", []):
            with contextlib.suppress(TypeError, ValueError, KeyError):
                latest, end = (_json(source.get(key)) for key in ("latestOffset", "endOffset"))
                identity = latest.get("identity") if isinstance(latest, dict) else None
                if isinstance(identity, str) and identity.startswith("query-"):
                    # A source numbers its own checkpoints; Spark's batch id can be ahead.
                    known[identity] = int(progress["batchId"]) - int(end["checkpoint"])

    def _move_pending(self, query_id: str, history: HistoryLog, extra: list[str]) -> None:
        """Move the events sources left under their identities into ``history``."""
        known = self._sources.setdefault(query_id, {})
        for identity in extra:
            known.setdefault(identity, 0)
        for identity, shift in known.items():
            for event in self._state.take_pending(identity):
                history.append(_shifted(event, shift))

    def _record_unsupervised(
        self, query_id: str, progress: dict[str, Any] | None, exception: str | None
    ) -> None:
        """Keep the history of a query no supervisor watches (worker thread)."""
        with self._lock:
            if query_id in self._watchers:
                return
        history = self._history(query_id)
        if history is None:
            return  # no component said where the query's checkpoint location is
        if progress is not None:
            self._learn_sources(query_id, progress)
        extra = _POLICY_SOURCE.findall(exception or "")
        self._move_pending(query_id, history, extra)
        if progress is not None:
            history.append(CompletedEvent.of_progress(progress))
        if exception:
            history.append(FailureEvent(None, FailureReason.QUERY_FAILED.name, exception[:2000]))

    def _bind_metrics(self, query_id: str) -> None:
        """Tell the exporter where the query's history is, once a component said (worker)."""
        metrics = self.metrics
        if metrics is None or self._bound.get(query_id) is metrics:
            return
        history = self._history(query_id)
        if history is not None:
            self._bound[query_id] = metrics
            metrics.bind(query_id, self._names.get(query_id), history)

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        """A query (re)started: arm its termination signal (query thread; keep it short).

        Spark calls this before the query's first trigger, so the session's settings recorded
        here are the ones the query's sources see.
        """
        with self._lock:
            self._finished.setdefault(str(event.runId), threading.Event())
        self._names[str(event.id)] = event.name
        if self.metrics is not None:
            self.metrics.started(str(event.id), event.name)
        if self._on_start is not None:
            try:
                self._on_start()
            except Exception:  # never fail the query's start from the listener
                _log.exception("recording the session's spark.ckpt.* settings failed")
        if self._restore is not None:
            # Here, not on the worker thread: the query's first batch must not stage anything
            # before the work a killed run staged after its checkpoint is discarded.
            with self._restoring:
                self._newest_run[str(event.id)] = str(event.runId)
                try:
                    self._restore(str(event.id))
                except Exception as e:
                    _log.exception("restoring query %s as it started failed", event.id)
                    self.errors.append((str(event.id), None, e))
                    with self._lock:
                        self._restore_failed.add(str(event.runId))

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        """Checkpoint ``batchId`` completed: run the hooks in the background (listener bus)."""
        query_id, batch_id = str(event.progress.id), int(event.progress.batchId)
        with self._lock:
            watcher = self._watchers.get(query_id)
        progress = json.loads(event.progress.json)
        if watcher is not None:
            watcher.checkpoint_completed(progress)
        else:
            self._worker.submit(self._record_unsupervised, query_id, progress, None)
        if self.metrics is not None:
            self._worker.submit(self._bind_metrics, query_id)
        self._submit(query_id, batch_id, str(event.progress.runId))

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        """The query waits for data: keep the history of an unsupervised one (listener bus).

        A source holding everything back runs no batch, so no progress event brings its
        declines (with what it holds back) into the history; Spark's idle events do.
        """
        self._worker.submit(self._record_unsupervised, str(event.id), None, None)
        if self.metrics is not None:
            self._worker.submit(self._bind_metrics, str(event.id))

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        """The query ended: run the hooks for everything complete (listener bus)."""
        self._worker.submit(self._record_unsupervised, str(event.id), None, event.exception)
        self._submit(str(event.id), None, str(event.runId))
        if self.metrics is not None:
            self.metrics.terminated(str(event.id))
