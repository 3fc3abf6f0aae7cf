"""Supervised queries: started, watched and restarted by the control plane (driver).

``control.supervise(build, checkpoint_location=..., name=...)`` starts the query that ``build()``
describes on a thread of its own. When the query fails, the failure manager records it (a failed
query fails over at once, DESIGN.md §5) and the restart strategy decides whether and when to start
it again from its checkpoint; when no restart is left, the supervised query fails with an error
naming the chain of reasons. Restarts never happen inside a listener callback.

Before every attempt (the first one too) the supervisor works out the checkpoint the query
resumes from (:mod:`spark_ckpt.state.restore`), tells the installed restore handlers and the query's
checkpoint hooks, and records the start in the query's history (:mod:`spark_ckpt.state.history`).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pyspark.errors import StreamingQueryException

from spark_ckpt.errors import (
    CheckpointHookError,
    ConfigError,
    RestoreError,
    SupervisedQueryError,
    message_in_trace,
)
from spark_ckpt.model.config import CkptConfig
from spark_ckpt.model.events import CompletedEvent, FailureEvent, HooksEvent, StartEvent
from spark_ckpt.model.failures import CheckpointFailure, FailureReason
from spark_ckpt.model.supervision import SupervisionRules
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import CheckpointRecord, HistoryLog
from spark_ckpt.state.hooks import (
    CheckpointHook,
    HookChannel,
    HookStore,
    restore_hooks,
    trigger_hooks,
)
from spark_ckpt.state.restore import notify_restore, restore_point
from spark_ckpt.state.savepoints import Savepoint, create_savepoint, restore_savepoint
from spark_ckpt.state.storage import Location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from spark_ckpt.spark.listener import CheckpointListener
    from spark_ckpt.state.registry import ControlState
    from spark_ckpt.state.restore import RestoreHandler

__all__ = ["ControlPlane", "SupervisedQuery"]

_log = logging.getLogger(__name__)
_POLL = 0.2  # seconds between checks of the running query; bounds stop and failover latency
_HOOK_POLL = 0.01  # seconds between looks for hook trigger requests (a sink's commit waits)


def last_batch_id(query: StreamingQuery) -> int | None:
    """The id of the newest batch ``query`` completed, None before its first (driver).

    Polled about once a second per supervised query. pyspark's ``lastProgress`` converts the
    whole progress event field by field, each of its Java collections ending in a ``Py4JError``
    pyspark converts through failing class lookups (see
    :class:`spark_ckpt.spark.listener.JsonProgressBridge`): about as costly as the listener's
    conversion was, on every poll. The JVM's progress object answers ``batchId()`` in one call.
    A Spark Connect query has no JVM object here; its progress comes parsed from JSON already.
    """
    jquery = getattr(query, "_jsq", None)
    if jquery is None:
        progress = query.lastProgress
        return None if progress is None else int(progress.batchId)
    jprogress = jquery.lastProgress()
    return None if jprogress is None else int(jprogress.batchId())


class ControlPlane(Protocol):
    """What a supervised query uses of the control plane that started it.

    :class:`~spark_ckpt.spark.control.Control` is the one implementation; naming only these
    members keeps this module from importing the one that imports it.
    """

    spark: SparkSession
    state: ControlState
    listener: CheckpointListener
    restore_handlers: dict[str, RestoreHandler]
    build_lock: threading.Lock

    def watch(self, supervised: SupervisedQuery) -> None:
        """Route the query's checkpoints and failed hooks to ``supervised`` (driver, per start)."""


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect client session (it has no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _pin_active_session(spark: SparkSession) -> None:
    """Make ``spark`` the active session of this thread's JVM twin (classic sessions only).

    Spark resolves Python data sources through the JVM thread's *active* session; the
    supervisor's thread (a JVM thread of its own under Py4J's pinned-thread mode) has none, so
    a restart would not find ``format("delta-2pc")`` without this. A Spark Connect server
    resolves them through the client's server-side session, so there is nothing to pin.
    """
    if is_connect(spark):
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


class SupervisedQuery:
    """One supervised streaming query and its restarts.

    Parameters
    ----------
    control
        The installed control plane.
    build
        Returns the ``DataStreamWriter`` to start (called again for every restart).
    checkpoint_location
        The query's checkpoint location (set on the writer by the supervisor).
    name
        The query name.
    config
        The ``spark.ckpt.*`` settings in force when supervision began.
    hooks
        Checkpoint hooks of this query.
    restore_from
        A savepoint to restore into ``checkpoint_location`` before the first attempt.
    path_mapping
        Old path prefix -> new one, for tables that moved since the savepoint was taken.
    """

    def __init__(
        self,
        control: ControlPlane,
        build: Callable[[], DataStreamWriter],
        checkpoint_location: str,
        name: str,
        config: CkptConfig,
        hooks: list[CheckpointHook] | None = None,
        restore_from: Savepoint | None = None,
        path_mapping: Mapping[str, str] | None = None,
    ) -> None:
        self._control = control
        self._restore_from = restore_from
        self._path_mapping = dict(path_mapping or {})
        self._build = build
        self.checkpoint_location = checkpoint_location
        self.name = name
        self.hooks = list(hooks or [])
        identifiers = [getattr(hook, "identifier", None) for hook in self.hooks]
        if not all(isinstance(i, str) and i for i in identifiers):
            raise ConfigError(
                f"every checkpoint hook of supervised query {name!r} needs a non-empty string "
                f"identifier (got {identifiers}); set the class attribute identifier"
            )
        if len(set(identifiers)) != len(identifiers):
            raise ConfigError(
                f"checkpoint hooks of supervised query {name!r} share an identifier "
                f"({identifiers}); give each hook a unique identifier"
            )
        # The session's storage settings (an S3 endpoint, credentials) reach the checkpoint.
        checkpoint = SparkCheckpoint(checkpoint_location, control.state.storage)
        self._checkpoint = checkpoint
        self._history = HistoryLog(checkpoint)
        self._hook_store = HookStore(checkpoint)
        self._strategy = config.restart_strategy_factory()()
        self.identity = f"{name}-{uuid.uuid4().hex[:12]}"
        """Given to the sources this supervisor builds, so their declines reach it."""
        self.rules = SupervisionRules(
            config.tolerable_failed_checkpoints,
            config.tolerable_failure_timeout,
            config.checkpoint_timeout,
            self._history.append,
        )
        """The failure accounting this glue feeds (see :mod:`spark_ckpt.model.supervision`)."""
        self._channel = HookChannel.for_checkpoint(control.state, checkpoint_location)
        if self.hooks:
            self._channel.enable(config.checkpoint_timeout)
        self.failovers: list[list[CheckpointFailure]] = []
        """Every failover so far, each as the chain of failures that caused it."""
        self.restarts = 0
        """Times the query was started again after a failover."""
        self.query: StreamingQuery | None = None
        """The query of the current attempt."""
        self.drain_requested_at: float | None = None
        """When ``stop(drain=True)`` asked the sources to drain (seconds since the epoch)."""
        self.drain_fixed_at: float | None = None
        """When the last source fixed its end for the drain: later data was not read."""
        self._stop = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._fatal: BaseException | None = None  # a misuse found while running: no restart
        self._thread = threading.Thread(
            target=self._supervise, name=f"spark-ckpt-supervisor-{name}", daemon=True
        )
        self._hook_thread = threading.Thread(
            target=self._serve_hooks, name=f"spark-ckpt-hooks-{name}", daemon=True
        )

    # -- called by the control plane --------------------------------------------------------

    def start(self) -> SupervisedQuery:
        """Start the first attempt and return at once (driver)."""
        if self._restore_from is not None:
            restore_savepoint(self._restore_from, self._checkpoint, self._path_mapping)
        if self.hooks:
            self._hook_thread.start()
        try:
            self._start_attempt()
        except BaseException:
            self._stop.set()
            self._done.set()
            raise
        self._thread.start()
        return self

    def checkpoint_completed(self, progress: dict[str, Any]) -> None:
        """A progress event: checkpoint ``progress["batchId"]`` completed (listener bus; quick)."""
        batch_id = int(progress["batchId"])
        self.rules.checkpoint_completed(batch_id)
        event = CompletedEvent.of_progress(progress)
        if self.hooks and self._hook_store.read(batch_id) is None:
            # Only a sink taking part in checkpoints asks for the hooks before commits/N.
            self.rules.request_failover(
                [
                    CheckpointFailure(
                        batch_id,
                        FailureReason.HOOK_IO_FAILED,
                        "checkpoint completed without triggering the checkpoint hooks: hooks "
                        "need a sink that takes part in checkpoints (delta-2pc)",
                        time.monotonic(),
                    )
                ]
            )
            self._fatal = ConfigError(
                f"supervised query {self.name!r} has checkpoint hooks but its sink did not "
                f"trigger them at checkpoint {batch_id}: write with format('delta-2pc') "
                f"(hooks are triggered by its pre-commit) or supervise without hooks"
            )
        self._history.append(event)

    def publish_failed(self, batch_id: int | None, error: BaseException) -> None:
        """Publishing after checkpoint ``batch_id`` failed (listener's worker thread).

        Counted (DESIGN.md §5) against the next checkpoint, which cannot complete its publish
        chain either: the publish is retried by that checkpoint's pre-commit and by recovery.
        The final publish after the query ended (``batch_id`` None) is only recorded: its error
        is raised by ``await_termination``.
        """
        message = str(error)[:2000]
        if batch_id is None:
            self._history.append(FailureEvent(None, FailureReason.PUBLISH_FAILED.name, message))
            return
        self.rules.fail(FailureReason.PUBLISH_FAILED, batch_id + 1, message)

    # -- the supervision loop (its own thread) ----------------------------------------------

    def _start_attempt(self) -> None:
        _pin_active_session(self._control.spark)
        state = self._control.state
        state.clear_declines(self.identity)
        point = restore_point(self._checkpoint)
        notify_restore(point, self._control.restore_handlers)
        if point.checkpoint_id is not None and self.hooks:
            restore_hooks(self.hooks, self._hook_store, point.checkpoint_id)
        state.set_restore_point(self.identity, point)
        self.rules.attempt_started()
        self._history.append(StartEvent(self.restarts, point.checkpoint_id, point.rerun_batch))
        with self._control.build_lock:
            # Sources created by this build claim the identity (see ControlState).
            state.set_pending_identity(self.identity)
            try:
                writer = self._build().option("checkpointLocation", self.checkpoint_location)
                self.query = writer.queryName(self.name).start()
            finally:
                state.set_pending_identity(None)
        self._control.watch(self)

    def _supervise(self) -> None:
        try:
            while True:
                query = self.query
                assert query is not None
                failure = self._wait(query)
                if failure is None:
                    return  # stopped by the user, or a bounded run ended
                self.failovers.append(failure)
                if self._fatal is not None:
                    self._error = self._fatal
                    return
                decision = self._strategy.on_failure()
                if not decision.restart:
                    self._error = SupervisedQueryError(self.name, failure, decision.reason)
                    return
                _log.warning(
                    "restarting supervised query %s in %.1fs after: %s",
                    self.name,
                    decision.delay,
                    "; ".join(map(str, failure)),
                )
                if self._stop.wait(decision.delay):
                    return
                self.restarts += 1
                self._start_attempt()
        except BaseException as e:  # the supervisor must end, and say why
            self._error = e
        finally:
            if self.hooks:
                self._channel.disable()
            self._done.set()

    def _check_expiry(self, query: StreamingQuery) -> None:
        """Tell the rules which batch is running, if any (polled about once a second)."""
        last = last_batch_id(query)
        batch_id = 0 if last is None else last + 1
        self.rules.trigger_seen(bool(query.status.get("isTriggerActive")), batch_id)

    def _check_sources(self) -> None:
        """Tell the rules the sources' current declines (polled about once a second)."""
        reports = self._control.state.declines(self.identity)
        declines = [(d.kind, d.reason) for d in reports]
        if not declines:
            self.rules.declines_seen([], 0)
            return
        # A source numbers its own checkpoints, which can lag Spark's batch ids (Spark runs an
        # empty first batch at the initial offset when a new query's source offers nothing), so
        # a decline is charged to the checkpoint Spark will take next.
        latest = self._checkpoint.latest_committed()
        held = {d.reason: d.held for d in reports if d.held is not None}
        self.rules.declines_seen(declines, 0 if latest is None else latest + 1, held_back=held)

    def _wait(self, query: StreamingQuery) -> list[CheckpointFailure] | None:
        """Wait for the attempt to end; return the failover chain, or None for a clean end."""
        self._running = None
        while True:
            if self._stop.is_set():
                return None
            try:
                ended = query.awaitTermination(1)
            except StreamingQueryException:
                ended = True  # it failed: query.exception() below says how
            if self._stop.is_set():
                return None
            if not ended:
                self._check_expiry(query)
                self._check_sources()
            chain = self.rules.take_failover()
            if chain is not None:
                query.stop()
                return chain
            if ended or not query.isActive:
                break
            time.sleep(_POLL)
        error = query.exception()
        if error is None:
            return None
        message = str(error)[:2000]
        restore = message_in_trace(message, RestoreError)
        if restore is not None:
            # A component refused the restored checkpoint (a source whose log or slot no longer
            # holds what comes after it): every restart would resume from the same checkpoint
            # and be refused again, so the query ends with the component's own error.
            self._fatal = RestoreError(restore)
        return self.rules.query_failed(message)

    # -- checkpoint hooks (a thread of their own) ---------------------------------------------

    def _serve_hooks(self) -> None:
        """Trigger the hooks whenever a sink's pre-commit asks (polled every few milliseconds)."""
        while not self._done.is_set():
            try:
                for name, batch_id, requested_at in self._channel.requests():
                    self._trigger(name, batch_id, requested_at)
            except Exception:  # the thread must outlive a bad request; the sink times out
                _log.exception("checkpoint hooks of supervised query %s", self.name)
            self._done.wait(_HOOK_POLL)

    def _trigger(self, name: str, batch_id: int, requested_at: float) -> None:
        try:
            record = trigger_hooks(self.hooks, self._hook_store, batch_id, requested_at)
        except CheckpointHookError as e:
            self.rules.hook_failed(batch_id, e.io, e.detail, str(e))
            self._channel.reply(name, e)
            return
        self._channel.reply(name, None)
        self._history.append(HooksEvent(batch_id, tuple(sorted(record.data))))

    # -- public -----------------------------------------------------------------------------

    def history(self) -> list[CheckpointRecord]:
        """One record per checkpoint, read from the checkpoint location (driver; any time).

        Covers earlier runs of the query on the same checkpoint location too.
        """
        return self._history.records()

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until supervision ends and the last attempt's completed batches are published.

        Returns False when ``timeout`` passed first. Raises :class:`SupervisedQueryError` when
        the query failed and no restart was left, and the final publish's error
        (:class:`~spark_ckpt.errors.PublishError`) when what the query completed could not all
        be published.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._done.wait(timeout):
            return False
        query = self.query
        if query is not None:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._control.listener.finished(str(query.runId)).wait(remaining):
                return False
        if self._error is not None:
            raise self._error
        failure = None if query is None else self._control.listener.final_error(str(query.runId))
        if failure is not None:
            raise failure  # never report a clean end with a tail left behind
        return True

    def stop(self, drain: bool = True, timeout: float = 600.0) -> None:
        """Stop supervising and stop the query; publish what completed (driver).

        Parameters
        ----------
        drain
            True drains as FLIP-147 means it: every ``txn-cdc`` source fixes its end at what
            it has now (data arriving later is not read), the query runs until everything up to
            there is in completed batches, and those are published before this returns. With
            sources that cannot drain (other formats), the batch in progress finishes first.
            False stops at once, cancelling the running batch (re-run on the next start).
        timeout
            Seconds to wait for the drain (or the running batch), and again for the final
            publish.

        Raises
        ------
        SupervisedQueryError
            When the drain did not finish within ``timeout`` (the query is stopped anyway;
            what completed is published, the rest is read again on the next start).
        """
        if not self._stop.is_set():
            self.rules.user_stopped()
        query = self.query
        deadline = time.monotonic() + timeout
        unfinished = None
        if drain and query is not None and query.isActive:
            unfinished = self._drain(query, deadline)
        self._stop.set()
        if query is not None and query.isActive:
            while drain and query.status.get("isTriggerActive") and time.monotonic() < deadline:
                time.sleep(0.05)
            query.stop()
        self._done.wait(timeout)
        if query is not None:
            self._control.listener.finished(str(query.runId)).wait(timeout)
        if unfinished is not None:
            raise SupervisedQueryError(self.name, [], unfinished)

    def _drain(self, query: StreamingQuery, deadline: float) -> str | None:
        """Drain the running attempt's sources; None when done, else what is unfinished."""
        state = self._control.state
        if not state.drains(self.identity):
            _log.info("supervised query %s: no source can drain; stops after the batch", self.name)
            return None
        self.drain_requested_at = state.request_drain(self.identity)
        while time.monotonic() < deadline:
            drains = state.drains(self.identity)
            if all(d is not None and d.reached for d in drains):
                fixed = [d.fixed_at for d in drains if d is not None]
                self.drain_fixed_at = max(fixed) if fixed else None
                return None
            if not query.isActive:
                return None  # it ended (or failed) by itself: nothing left to drain
            time.sleep(_POLL / 4)
        return "its sources did not drain within the timeout; stopped without the tail"

    # -- savepoints -------------------------------------------------------------------------

    def savepoint(self, target: str) -> Savepoint:
        """Take a savepoint at the newest completed and published batch (driver; any time).

        The query keeps running. ``target`` is a directory (local or object store); the
        savepoint is a new directory below it, never removed by retention.

        Raises
        ------
        SavepointError
            When no batch is completed and published yet.
        """
        return create_savepoint(
            self._checkpoint,
            Location(target, self._control.state.storage),
            query_name=self.name,
        )

    def stop_with_savepoint(
        self, target: str, drain: bool = True, timeout: float = 600.0
    ) -> Savepoint:
        """Stop the query (draining it by default) and take a savepoint at its last batch (driver).

        Raises
        ------
        SupervisedQueryError
            When the drain did not finish within ``timeout``.
        PublishError
            When what the query completed could not all be published (no savepoint is taken:
            it would not be at the query's last batch).
        """
        self.stop(drain=drain, timeout=timeout)
        query = self.query
        failure = None if query is None else self._control.listener.final_error(str(query.runId))
        if failure is not None:
            raise failure
        return self.savepoint(target)
