"""Supervised queries: started, watched and restarted by the control plane (driver).

``control.supervise(build, checkpoint_location=..., name=...)`` starts the query that ``build()``
describes on a thread of its own. When the query fails, the failure manager records it (a failed
query fails over at once, DESIGN.md §5) and the restart strategy decides whether and when to start
it again from its checkpoint; when no restart is left, the supervised query fails with an error
naming the chain of reasons. Restarts never happen inside a listener callback.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark.errors import StreamingQueryException

from spark_ckpt.checkpoint_dir import SparkCheckpoint
from spark_ckpt.config import CkptConfig
from spark_ckpt.errors import SupervisedQueryError
from spark_ckpt.failures import CheckpointFailure, CheckpointFailureManager, FailureReason

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from spark_ckpt.control import Control

__all__ = ["SupervisedQuery"]

_log = logging.getLogger(__name__)
_POLL = 0.2  # seconds between checks of the running query; bounds stop and failover latency


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
    """

    def __init__(
        self,
        control: Control,
        build: Callable[[], DataStreamWriter],
        checkpoint_location: str,
        name: str,
        config: CkptConfig,
    ) -> None:
        self._control = control
        self._build = build
        self.checkpoint_location = checkpoint_location
        self.name = name
        self._strategy = config.restart_strategy_factory()()
        self._checkpoint_timeout = config.checkpoint_timeout
        self.identity = f"{name}-{uuid.uuid4().hex[:12]}"
        """Given to the sources this supervisor builds, so their declines reach it."""
        self._running: tuple[int, float] | None = None  # (batch id, seen active since)
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
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._supervise, name=f"spark-ckpt-supervisor-{name}", daemon=True
        )

    # -- called by the control plane --------------------------------------------------------

    def start(self) -> SupervisedQuery:
        """Start the first attempt and return at once (driver)."""
        self._start_attempt()
        self._thread.start()
        return self

    def checkpoint_completed(self, batch_id: int) -> None:
        """Checkpoint ``batch_id`` completed (listener thread)."""
        with self._lock:
            self.failures.handle_completed(batch_id)

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
            with self._lock:
                self.failures.handle_failure(
                    FailureReason.CHECKPOINT_EXPIRED,
                    batch_id,
                    f"batch {batch_id} ran longer than checkpointTimeout="
                    f"{self._checkpoint_timeout:g}s",
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
        latest = SparkCheckpoint(self.checkpoint_location).latest_committed()
        next_checkpoint = 0 if latest is None else latest + 1
        with self._lock:
            for decline in declines:
                if decline["kind"] == "hard":
                    self.failures.handle_failure(
                        FailureReason.SOURCE_DECLINED_HARD,
                        next_checkpoint,
                        str(decline["reason"]),
                    )
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
        with self._lock:
            self.failures.handle_failure(FailureReason.QUERY_FAILED, None, str(error)[:2000])
        chain, self._failover_chain = self._failover_chain or [], None
        return chain

    # -- public -----------------------------------------------------------------------------

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait until supervision ends and the last attempt's completed batches are published.

        Returns False when ``timeout`` passed first. Raises :class:`SupervisedQueryError` when
        the query failed and no restart was left.
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
