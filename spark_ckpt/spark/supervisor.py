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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.errors import StreamingQueryException

from spark_ckpt.errors import CheckpointHookError, ConfigError, SupervisedQueryError
from spark_ckpt.model.config import CkptConfig
from spark_ckpt.model.failures import CheckpointFailure, CheckpointFailureManager, FailureReason
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import CheckpointRecord, HistoryLog, progress_event
from spark_ckpt.state.hooks import (
    CheckpointHook,
    HookChannel,
    HookStore,
    restore_hooks,
    trigger_hooks,
)
from spark_ckpt.state.restore import notify_restore, restore_point

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from spark_ckpt.spark.control import Control

__all__ = ["SupervisedQuery"]

_log = logging.getLogger(__name__)
_POLL = 0.2  # seconds between checks of the running query; bounds stop and failover latency
_HOOK_POLL = 0.01  # seconds between looks for hook trigger requests (a sink's commit waits)


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
    """

    def __init__(
        self,
        control: Control,
        build: Callable[[], DataStreamWriter],
        checkpoint_location: str,
        name: str,
        config: CkptConfig,
        hooks: list[CheckpointHook] | None = None,
    ) -> None:
        self._control = control
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
        checkpoint = SparkCheckpoint(checkpoint_location)
        self._checkpoint = checkpoint
        self._history = HistoryLog(checkpoint)
        self._hook_store = HookStore(checkpoint)
        self._strategy = config.restart_strategy_factory()()
        self._checkpoint_timeout = config.checkpoint_timeout
        self.identity = f"{name}-{uuid.uuid4().hex[:12]}"
        """Given to the sources this supervisor builds, so their declines reach it."""
        self._running: tuple[int, float] | None = None  # (batch id, seen active since)
        self._declines: set[tuple[int, str, str]] = set()  # recorded in the history already
        self._hook_abort: CheckpointFailure | None = None  # a hook aborted this attempt's batch
        self._channel = HookChannel.for_checkpoint(control.state, checkpoint_location)
        if self.hooks:
            self._channel.enable(self._checkpoint_timeout)
        self.failovers: list[list[CheckpointFailure]] = []
        """Every failover so far, each as the chain of failures that caused it."""
        self._failover_chain: list[CheckpointFailure] | None = None
        self.failures = CheckpointFailureManager(
            config.tolerable_failed_checkpoints,
            config.tolerable_failure_timeout,
            self._request_failover,
        )
        self.restarts = 0
        """Times the query was started again after a failover."""
        self.query: StreamingQuery | None = None
        """The query of the current attempt."""
        self._stop = threading.Event()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._fatal: BaseException | None = None  # a misuse found while running: no restart
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._supervise, name=f"spark-ckpt-supervisor-{name}", daemon=True
        )
        self._hook_thread = threading.Thread(
            target=self._serve_hooks, name=f"spark-ckpt-hooks-{name}", daemon=True
        )

    # -- called by the control plane --------------------------------------------------------

    def start(self) -> SupervisedQuery:
        """Start the first attempt and return at once (driver)."""
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
        with self._lock:
            self.failures.handle_completed(batch_id)
        event = progress_event(progress)
        if self.hooks and self._hook_store.read(batch_id) is None:
            # Only a sink taking part in checkpoints asks for the hooks before commits/N.
            self._request_failover(
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
            self._history.append(
                {
                    "event": "failure",
                    "reason": FailureReason.PUBLISH_FAILED.name,
                    "message": message,
                }
            )
            return
        self._fail(FailureReason.PUBLISH_FAILED, batch_id + 1, message)

    def _fail(self, reason: FailureReason, checkpoint: int | None, message: str) -> None:
        """Record a failure with the manager and in the history (any thread)."""
        self._history.append(
            {
                "event": "failure",
                "checkpoint": checkpoint,
                "reason": reason.name,
                "message": message,
            }
        )
        with self._lock:
            self.failures.handle_failure(reason, checkpoint, message)

    def _request_failover(self, chain: list[CheckpointFailure]) -> None:
        self._failover_chain = chain

    # -- the supervision loop (its own thread) ----------------------------------------------

    def _start_attempt(self) -> None:
        # Spark resolves Python data sources through the JVM thread's *active* session; the
        # supervisor's thread (a JVM thread of its own under Py4J's pinned-thread mode) has none,
        # so a restart would not find format("delta-2pc") without this.
        spark = self._control.spark
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        state = self._control.state
        state.clear_source_reports(self.identity)
        point = restore_point(self._checkpoint)
        notify_restore(point, self._control.restore_handlers)
        if point.checkpoint_id is not None and self.hooks:
            restore_hooks(self.hooks, self._hook_store, point.checkpoint_id)
        state.set_restore_point(self.identity, point.to_json())
        self._hook_abort = None
        self._history.append(
            {
                "event": "start",
                "attempt": self.restarts,
                "restored": point.checkpoint_id,
                "rerunBatch": point.rerun_batch,
            }
        )
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
        """Count the running batch as expired once it runs past ``checkpointTimeout``.

        Polled about once a second. A trigger seen active for the same batch for longer than the
        timeout is a counted failure of that checkpoint (each checkpoint counts once).
        """
        if not query.status.get("isTriggerActive"):
            self._running = None
            return
        last = query.lastProgress
        batch_id = 0 if last is None else int(last.batchId) + 1
        now = time.monotonic()
        if self._running is None or self._running[0] != batch_id:
            self._running = (batch_id, now)
            return
        if now - self._running[1] > self._checkpoint_timeout:
            self._fail(
                FailureReason.CHECKPOINT_EXPIRED,
                batch_id,
                f"batch {batch_id} ran longer than checkpointTimeout={self._checkpoint_timeout:g}s",
            )

    def _check_sources(self) -> None:
        """Feed the sources' declines to the failure manager (polled about once a second).

        A hard decline is a counted failure of its checkpoint; any decline means data is held
        back, which the manager times out after ``tolerableFailureTimeout``.
        """
        declines = [
            report["decline"]
            for report in self._control.state.source_reports(self.identity)
            if report.get("decline")
        ]
        if not declines:
            with self._lock:
                self.failures.handle_holding(False)
            return
        # A source numbers its own checkpoints, which can lag Spark's batch ids (Spark runs an
        # empty first batch at the initial offset when a new query's source offers nothing), so
        # a decline is charged to the checkpoint Spark will take next.
        latest = self._checkpoint.latest_committed()
        next_checkpoint = 0 if latest is None else latest + 1
        for decline in declines:
            kind, reason = str(decline["kind"]), str(decline["reason"])
            if (next_checkpoint, kind, reason) not in self._declines:
                self._declines.add((next_checkpoint, kind, reason))
                self._history.append(
                    {
                        "event": "decline",
                        "checkpoint": next_checkpoint,
                        "kind": kind,
                        "reason": reason,
                    }
                )
            if kind == "hard":
                with self._lock:
                    self.failures.handle_failure(
                        FailureReason.SOURCE_DECLINED_HARD, next_checkpoint, reason
                    )
        with self._lock:
            self.failures.handle_holding(True)

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
            if self._failover_chain is not None:
                chain, self._failover_chain = self._failover_chain, None
                query.stop()
                return chain
            if ended or not query.isActive:
                break
            time.sleep(_POLL)
        error = query.exception()
        if error is None:
            return None
        self._fail(FailureReason.QUERY_FAILED, None, str(error)[:2000])
        chain, self._failover_chain = self._failover_chain or [], None
        if self._hook_abort is not None and self._hook_abort not in chain:
            # Spark aborts a checkpoint only by failing its batch: name the hook as the cause.
            chain.insert(0, self._hook_abort)
        return chain

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
            reason = FailureReason.HOOK_IO_FAILED if e.io else FailureReason.HOOK_TRIGGER_FAILED
            self._hook_abort = CheckpointFailure(batch_id, reason, e.detail, time.monotonic())
            self._fail(reason, batch_id, str(e))
            self._channel.reply(name, e)
            return
        self._channel.reply(name, None)
        self._history.append(
            {"event": "hooks", "checkpoint": batch_id, "identifiers": sorted(record.data)}
        )

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
            if not self._control.listener.finished(str(query.id)).wait(remaining):
                return False
        if self._error is not None:
            raise self._error
        failure = None if query is None else self._control.listener.final_error(str(query.id))
        if failure is not None:
            raise failure  # never report a clean end with a tail left behind
        return True

    def stop(self, drain: bool = True, timeout: float = 600.0) -> None:
        """Stop supervising and stop the query; publish what completed.

        Parameters
        ----------
        drain
            True lets the batch in progress finish (and be published) before the query stops;
            False stops at once, cancelling it (it is re-run on the next start).
        timeout
            Seconds to wait for the running batch, and again for the final publish.
        """
        self._stop.set()
        query = self.query
        if query is not None and query.isActive:
            deadline = time.monotonic() + timeout
            while drain and query.status.get("isTriggerActive") and time.monotonic() < deadline:
                time.sleep(0.05)
            query.stop()
        self._done.wait(timeout)
        if query is not None:
            self._control.listener.finished(str(query.id)).wait(timeout)
