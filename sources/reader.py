"""The ``txn-cdc`` stream reader: Spark's streaming reader API around a connector and the gate.

Every connector is driven by :class:`TxnCdcStreamReader`. On each trigger it asks the connector
what complete units are available, lets :func:`~spark_ckpt.sources.gate.choose_cut` pick the cut
(asking :meth:`TxnCdcStreamReader.is_snapshot_available`, the FLIP-170 provider), and either returns
the new end offset or returns ``start`` unchanged and records a decline. Declines and their
escalation are visible in :meth:`TxnCdcStreamReader.reportLatestOffset`, so they appear in every
progress event's ``sources[i].latestOffset``.

Whatever the connector holds back (changes of incomplete transactions, a snapshot in progress)
is tracked on every trigger, cut or not (:mod:`spark_ckpt.model.held_back`): reported as
``heldBack``, warned about in the log while it lasts, and once it has made no progress for
``softDeclineTimeout`` the reader declines every cut hard, naming the oldest unit it holds.
"""

from __future__ import annotations

import importlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_ckpt.errors import CheckpointPolicyError
from spark_ckpt.model.availability import (
    CheckpointAvailabilityProvider,
    SnapshotAvailability,
)
from spark_ckpt.model.config import CkptConfig
from spark_ckpt.model.declines import DeclineReport, DeclineTracker
from spark_ckpt.model.held_back import HeldBack, HeldBackTracker
from spark_ckpt.model.supervision import SupervisionRules
from spark_ckpt.state.registry import ControlState, DrainReport

from .connector import ChangeConnector, Plan
from .gate import Cut, GateDecision, choose_cut
from .options import SourceOptions
from .registry import CONNECTORS
from .schema import COLUMNS, with_types

__all__ = ["TxnCdcStreamReader", "make_connector"]

_log = logging.getLogger(__name__)
_DRAIN_POLL = 0.02  # seconds between looks for a drain request; bounds how late the end is fixed


def make_connector(options: SourceOptions) -> ChangeConnector:
    """Build the connector the options name (driver, once per query run).

    Executors get a pickled copy. Imports that connector's module (its builder) and no other.
    """
    module, _, name = CONNECTORS[options.connector].builder.partition(":")
    build: Callable[[Any, SourceOptions], ChangeConnector] = getattr(
        importlib.import_module(module), name
    )
    return build(options.connector_options, options)


def _key(offset: dict[str, Any]) -> str:
    return json.dumps(offset, sort_keys=True)


class TxnCdcStreamReader(
    DataSourceStreamReader, SupportsTriggerAvailableNow, CheckpointAvailabilityProvider
):
    """Streams whole transactions from a connector; checkpoints only where snapshots are available.

    Created by Spark once per query run, in the driver-side reader process; ``read`` runs on
    executors from a separately pickled copy and uses only its partition.

    Parameters
    ----------
    options
        The parsed source options.
    connector
        The connector to read from.
    control
        The control plane's state; with a supervised identity, declines are reported there.
    clock
        Epoch seconds, for the decline and held-back trackers (a fake one in tests).
    """

    def __init__(
        self,
        options: SourceOptions,
        connector: ChangeConnector,
        control: ControlState | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = options
        self.connector = connector
        self._control = control
        # What the control plane last heard; None until the first report, which tells the
        # supervisor that this source can drain.
        self._reported: tuple[DeclineReport | None, DrainReport | None] | None = None
        self.declines = DeclineTracker(options.soft_decline_timeout, clock)
        self.held = HeldBackTracker(clock)
        """What the connector holds back, tracked on every trigger."""
        self.last_decision: GateDecision | None = None
        self._proposal: tuple[int, Cut] | None = None
        self._last_checkpoint = -1
        # The commit time of the newest transaction a batch of this run delivered (epoch ms).
        self._newest_commit_ms: int | None = None
        self._resumed = False
        self._initial: dict[str, Any] | None = None  # the run's initial offset, once asked
        # The batch the last latestOffset planned, for Spark's partitions call that follows.
        self._planned: tuple[str, str, list[object]] | None = None
        # Serialises the connector between Spark's calls and the drain watcher's thread.
        self._lock = threading.Lock()
        self._drain: DrainReport | None = None
        self._watcher: threading.Thread | None = None
        # A query no supervisor watches: this reader applies the failure policy itself.
        self._policy: SupervisionRules | None = None
        self._config: CkptConfig | None = None
        self._unpoliced = False  # installed without a recorded policy: apply none
        self.policy_identity: str | None = None
        """Under which this reader leaves history events when no supervisor watches it."""

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the reader for read() only: no lock, no watcher thread.
        state = dict(self.__dict__)
        state["_lock"] = None
        state["_watcher"] = None
        state["_policy"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- the failure policy of an unsupervised query ------------------------------------------

    def _policy_rules(self) -> SupervisionRules | None:
        """The policy this reader applies itself, when installed and unsupervised (driver)."""
        control = self._control
        if control is None or self.options.identity is not None or self._unpoliced:
            return None
        if self._policy is None:
            config = self._config = control.policy()
            if config is None:
                self._unpoliced = True
                return None
            identity = self.policy_identity = f"query-{uuid.uuid4().hex[:12]}"
            self._policy = SupervisionRules(
                config.tolerable_failed_checkpoints,
                config.tolerable_failure_timeout,
                config.checkpoint_timeout,
                lambda event: control.record_pending(identity, event),
            )
        return self._policy

    def _police(self, checkpoint_id: int) -> None:
        """Feed this trigger's decline to the policy; stop the query when it fails over."""
        rules = self._policy_rules()
        if rules is None:
            return
        current = None if self.declines.current is None else self.declines.current.report()
        seen = [] if current is None else [(current.kind, current.reason)]
        held = self.held.current
        rules.declines_seen(
            seen,
            checkpoint_id,
            held_back=None if current is None or held is None else {current.reason: held.to_json()},
        )
        chain = rules.take_failover()
        if chain is None:
            return
        tolerable = "?" if self._config is None else self._config.tolerable_failed_checkpoints
        raise CheckpointPolicyError(
            f"stopped by spark-ckpt's checkpoint failure policy "
            f"(spark.ckpt.tolerableFailedCheckpoints={tolerable}; no supervisor to restart the "
            f"query). Reason chain: {'; '.join(map(str, chain))}. Source {self.policy_identity}"
        )

    # -- drain (FLIP-147) ------------------------------------------------------------------

    def _watch_for_drain(self) -> None:
        """Start the thread that fixes the end when a drain is requested (driver, once)."""
        if self._watcher is not None or self._control is None or self.options.identity is None:
            return
        self._watcher = threading.Thread(
            target=self._await_drain, name="txn-cdc-drain-watcher", daemon=True
        )
        self._watcher.start()

    def _await_drain(self) -> None:
        """Poll for a drain request; fix the connector's end at once when it comes (thread).

        Fixing the end here, not on the next trigger, keeps out what arrives while a batch is
        still running: the end is what was available within :data:`_DRAIN_POLL` of the request.
        """
        control, identity = self._control, self.options.identity
        assert control is not None
        assert identity is not None
        while not control.drain_requested(identity):
            time.sleep(_DRAIN_POLL)
        with self._lock:
            self.connector.prepare_available_now()
            self._drain = DrainReport(time.time())
            _log.info("txn-cdc drains: its end is fixed at what was available now")
            self._report()

    # -- FLIP-170 ---------------------------------------------------------------------------

    def is_snapshot_available(self, checkpoint_id: int) -> SnapshotAvailability:
        """Answer for the cut currently proposed for ``checkpoint_id`` (driver, per question).

        The gate proposes cuts one at a time; the connector decides (a transaction boundary,
        no non-resumable snapshot phase in progress, ...).
        """
        proposal = self._proposal
        if proposal is None or proposal[0] != checkpoint_id:
            return SnapshotAvailability.hard_failure(
                f"no cut is proposed for checkpoint {checkpoint_id}"
            )
        return self.connector.availability(proposal[1])

    def _ask(self, checkpoint_id: int, cut: Cut) -> SnapshotAvailability:
        self._proposal = (checkpoint_id, cut)
        return self.is_snapshot_available(checkpoint_id)

    # -- Spark's streaming reader API (driver) ------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """The connector's initial offset, asked once per run (driver).

        Spark asks at every trigger until the query logs its first offset (the start of
        ``MicroBatchExecution.getStartOffset``), and the first triggers may plan nothing (a
        snapshot being read, a transaction still open, no data yet). Asked again, a connector
        that resolves a moving position (Kafka's ``startingOffsets=latest``) would move the
        start past what arrived in between, and postgres's snapshot slot would be asked to prove
        itself while it was being created (a query failed so): the first answer is kept for the
        run, as Spark's own Kafka source keeps its initial offsets.
        """
        self._resumed = True  # a new query restores nothing
        if self._initial is None:
            self._initial = self.connector.initial_offset()
        return self._initial

    def _resume(self, start: dict[str, Any]) -> None:
        """Restore notification: the first start offset of a run is the restored checkpoint's end.

        Spark hands a restarted reader the end offset of the checkpoint it resumes from as the
        first ``start`` (of ``latestOffset``, or of ``partitions`` when a logged batch is re-run).
        A supervised reader also learns Spark's checkpoint id from the control plane.
        """
        if self._resumed:
            return
        self._resumed = True
        restored = None
        if self._control is not None and self.options.identity is not None:
            point = self._control.restore_point(self.options.identity)
            restored = None if point is None else point.checkpoint_id
        _log.info(
            "txn-cdc resumes from checkpoint %s (source checkpoint %s)",
            "unknown" if restored is None else restored,
            start.get("checkpoint"),
        )
        self.connector.resume(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxChangesPerTrigger`` as a row limit (driver, once per query run)."""
        cap = self.options.max_changes_per_trigger
        return ReadAllAvailable() if cap is None else ReadMaxRows(cap)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """End of the next batch: the last available cut, or ``start`` (driver, per trigger).

        ``ReadMaxRows`` is a soft cap: the batch ends at the last transaction boundary under it,
        and a single larger transaction is delivered whole. ``ReadAllAvailable`` (what Spark
        passes when a trigger must read everything) ignores ``maxChangesPerTrigger``.
        """
        self._watch_for_drain()
        with self._lock:
            return self._latest_offset(start, limit)

    def _latest_offset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._resume(start)
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        checkpoint_id = int(start.get("checkpoint", -1)) + 1
        self._last_checkpoint = checkpoint_id - 1
        plan = self.connector.plan(start, cap)
        held = self._observe_held(plan)
        # Held back without progress for softDeclineTimeout: no cut at all, even where one is
        # available, so the failure policy sees the hard decline (a transaction that never
        # completes must not be left behind while later ones flow past it).
        stalled = held is not None and held.stalled_for > self.declines.timeout
        if stalled:
            decision = GateDecision(None, None, 0)
        else:
            decision = choose_cut(
                plan.unit_sizes,
                cap,
                lambda cut: self._ask(checkpoint_id, cut),
                gated=self.options.gated,
            )
        self.last_decision = decision
        self._proposal = None
        if decision.cut is not None:
            self.declines.accept()
            planned = self.connector.batch(decision.cut, checkpoint_id)
            self._planned = (_key(start), _key(planned.end), planned.partitions)
            if planned.newest_commit_ms is not None:
                self._newest_commit_ms = max(planned.newest_commit_ms, self._newest_commit_ms or 0)
            self._last_checkpoint = checkpoint_id
            self._report()
            self._police(checkpoint_id)
            return planned.end
        if self._drain is not None and not self._drain.reached:
            # No cut is left before the fixed end, and everything before it is in completed
            # batches (Spark constructs a batch only after the previous one committed). A
            # transaction still incomplete at the fixed end stays for the next run.
            self._drain = DrainReport(self._drain.fixed_at, reached=True)
        refusal = decision.refusal or plan.held_back
        if refusal is None and stalled:
            assert held is not None
            refusal = SnapshotAvailability.soft_failure(held.reason)
        if refusal is None and plan.idle is not None:
            # Nothing to deliver, but the position moves or work runs: a batch without rows.
            self.declines.idle()
            self._planned = (_key(start), _key(plan.idle.end), plan.idle.partitions)
            self._last_checkpoint = checkpoint_id
            self._report()
            self._police(checkpoint_id)
            return plan.idle.end
        if refusal is None:
            self.declines.idle()
        else:
            decline = self.declines.decline(
                checkpoint_id,
                refusal,
                plan.held_changes,
                stalled_for=None if held is None else held.stalled_for,
                oldest=None if held is None else held.oldest,
            )
            log = _log.warning if decline.availability.is_hard else _log.info
            log("txn-cdc declined checkpoint %d: %s", checkpoint_id, decline.availability)
        self._report()
        self._police(checkpoint_id)
        return start

    def _observe_held(self, plan: Plan) -> HeldBack | None:
        """Track what ``plan`` holds back; warn at a bounded interval while it lasts (driver)."""
        reason = None if plan.held_back is None else plan.held_back.message
        self.held.observe(plan.held_changes, plan.held_units, plan.oldest_held, reason)
        if self.held.warning_due():
            held = self.held.current
            assert held is not None
            _log.warning("txn-cdc (%s): %s", self.connector.name, held.describe())
        return self.held.current

    def _report(self) -> None:
        """Tell the control plane about the current decline, when supervised and it changed."""
        if self._control is None or self.options.identity is None:
            return
        current = self.declines.current
        held = self.held.current
        # Less heldForMs, which changes every trigger: the report changes when the decline does.
        shown = None
        if held is not None:
            shown = {k: v for k, v in held.to_json().items() if k != "heldForMs"}
        report = (None if current is None else current.report(shown), self._drain)
        if report != self._reported:
            self._control.report_source(self.options.identity, *report)
            self._reported = report

    def reportLatestOffset(self) -> dict[str, Any]:
        """Decline state for progress events (``sources[i].latestOffset``); driver, per trigger.

        ``heldBack``: what the source holds back at the last trigger (changes, open
        ``transactions``, the ``oldest``, ``sinceMs``, ``heldForMs``, ``lastProgressMs``,
        ``reason``), or None. ``newestCommitMs``: the commit time of the newest source
        transaction a batch of this run delivered, up to the batch this trigger planned (epoch
        milliseconds), when the connector knows it.
        """
        current = self.declines.current
        held = self.held.current
        return {
            "connector": self.connector.name,
            "lastCheckpoint": self._last_checkpoint,
            "softDeclines": self.declines.soft_declines,
            "hardDeclines": self.declines.hard_declines,
            "decline": current.to_json() if current is not None else None,
            "identity": self.options.identity or self.policy_identity,
            "status": self.connector.status(),
            "heldBack": None if held is None else held.to_json(),
            "newestCommitMs": self._newest_commit_ms,
        }

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the source's current end as the target of ``Trigger.availableNow`` (driver, once)."""
        self.connector.prepare_available_now()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """Input partitions of ``(start, end]`` (driver, per batch; ``[]`` when start == end).

        Normally the batch the last ``latestOffset`` planned; after a restart, the batch the
        offset log ends with, which the connector plans again.
        """
        with self._lock:
            return self._partitions(start, end)

    def _partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        self._resume(start)
        if start == end:
            return []
        planned, self._planned = self._planned, None
        if planned is not None and planned[:2] == (_key(start), _key(end)):
            values = planned[2]
        else:
            values = self.connector.replan(start, end)
        return [InputPartition(value) for value in values]

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has processed everything up to ``end`` (driver, per batch)."""
        with self._lock:
            self.connector.commit(end)
            if self._policy is not None:
                self._policy.checkpoint_completed(int(end.get("checkpoint", -1)))

    def stop(self) -> None:
        """Release the connector's resources (driver, once when the query stops)."""
        self.connector.stop()

    # -- executors ----------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield one partition's rows as Arrow record batches (executor, per task).

        With ``columnTypes=true``, batches of a connector that does not know its types get a
        null ``column_types`` column.
        """
        batches = self.connector.read(partition.value)
        if not self.options.column_types:
            return batches
        width = len(COLUMNS)
        return (b if b.num_columns > width else with_types(b, None) for b in batches)
