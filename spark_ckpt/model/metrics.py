"""The metrics spark-ckpt exports, computed from a query's history events (pure).

:mod:`spark_ckpt.model.metric_specs` declares them (re-exported here). :class:`QueryMetrics`
folds one query's history events (:mod:`spark_ckpt.model.events`: what the progress events, the
sources' reports and the sink record) into values; :meth:`QueryMetrics.families` computes them
at a given moment, so a gauge that is "now minus X" (freshness, how long data has been held
back) is computed when it is scraped and keeps growing while a query stalls.

Pure Python: no Spark, no Prometheus client, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_ckpt.model.events import (
    CompletedEvent,
    DeclineEvent,
    FailureEvent,
    HistoryEvent,
    PublishedEvent,
    StartEvent,
    batch_ended_at,
)
from spark_ckpt.model.metric_specs import (
    DURATION_BUCKETS,
    METRICS,
    WAL_STATUSES,
    MetricSpec,
)

__all__ = [
    "DURATION_BUCKETS",
    "METRICS",
    "WAL_STATUSES",
    "Family",
    "MetricSpec",
    "QueryMetrics",
    "decline_category",
    "event_key",
]

MAX_UNPUBLISHED = 1000
"""Completed checkpoints kept while they wait to be published (older ones are forgotten)."""


@dataclass
class Family:
    """One metric's samples at one moment.

    ``samples`` maps label values (in :attr:`MetricSpec.labels` order) to the value; for a
    histogram, to its sum, with :attr:`buckets` (cumulative counts per upper bound, ``+Inf``
    last) under the same label values.
    """

    spec: MetricSpec
    samples: dict[tuple[str, ...], float] = field(default_factory=dict)
    buckets: dict[tuple[str, ...], list[tuple[float, int]]] = field(default_factory=dict)


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, value: float) -> None:
        self.total += value
        for index, bound in enumerate((*DURATION_BUCKETS, math.inf)):
            if value <= bound:
                self.counts[index] += 1

    def cumulative(self) -> list[tuple[float, int]]:
        return list(zip((*DURATION_BUCKETS, math.inf), self.counts, strict=True))


def decline_category(kind: str, reason: str) -> str:
    """A decline's reason in one word, so the declines counter's labels stay few.

    ``timeout`` (soft declines escalated by ``softDeclineTimeout``), ``snapshot`` (a snapshot
    is being read), ``incomplete_transaction`` (a transaction's END or some of its events not
    read yet), ``split_transaction`` (the cut would split one), ``unit_boundary`` (the
    connector cuts only between units), else ``other``.
    """
    text = reason.lower()
    if kind == "hard" and "exceeded softdeclinetimeout" in text:
        return "timeout"
    if "snapshot" in text:
        return "snapshot"
    if "would split" in text:
        return "split_transaction"
    if any(m in text for m in ("end has not", "has ended but only", "commit is not in")):
        return "incomplete_transaction"
    if "ends only" in text or "whole transactions only" in text or "boundary" in text:
        return "unit_boundary"
    return "other"


def event_key(event: HistoryEvent) -> tuple[str, float | None, int | None]:
    """What tells one stored event from another (its kind, time and checkpoint)."""
    return (event.kind, event.at, getattr(event, "checkpoint", None))


def _num(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


@dataclass
class _Source:
    """What is known of one source of the query."""

    connector: str
    status: Mapping[str, Any] | None = None
    held: Mapping[str, Any] | None = None
    newest_published_ms: float | None = None


@dataclass
class _Sink:
    published: int = 0
    rows: int = 0
    last: int | None = None
    latency: _Histogram = field(default_factory=_Histogram)


class QueryMetrics:
    """One query's metrics, folded from its history events (oldest first).

    Feed every event once, in the order they were recorded: the whole stored history when
    the exporter first sees the query (so counters go on from where an earlier driver left
    them, as far back as the history reaches), then each event as it is appended.
    """

    def __init__(self) -> None:
        self.restarts = 0
        self.failures: dict[str, int] = {}
        self.declines: dict[tuple[str, str], int] = {}
        self.completed = 0
        self.rows = 0
        self.last_completed: int | None = None
        self.last_completed_at: float | None = None
        self.durations = _Histogram()
        self.sources: dict[str, _Source] = {}
        self.sinks: dict[str, _Sink] = {}
        # Completed checkpoints not published yet: rows, end of the batch, newest commit per
        # source (published checkpoints are dropped).
        self._unpublished: dict[int, tuple[int, float | None, dict[str, float]]] = {}
        self._newest_completed_ms: dict[str, float] = {}
        self._publishes = False

    # -- folding ------------------------------------------------------------------------------

    def observe(self, event: HistoryEvent) -> None:
        """Fold one event in."""
        if isinstance(event, StartEvent):
            if event.attempt > 0:
                self.restarts += 1
        elif isinstance(event, FailureEvent):
            self.failures[event.reason] = self.failures.get(event.reason, 0) + 1
        elif isinstance(event, DeclineEvent):
            key = (event.decline, decline_category(event.decline, event.reason))
            self.declines[key] = self.declines.get(key, 0) + 1
            if event.held is not None:
                self._held_decline(event.held, event.at)
        elif isinstance(event, CompletedEvent):
            self._completed(event)
        elif isinstance(event, PublishedEvent):
            self._published(event)

    def observe_all(self, events: Iterable[HistoryEvent]) -> None:
        """Fold ``events`` in, oldest first."""
        for event in events:
            self.observe(event)

    def _held_decline(self, held: Mapping[str, Any], at: float | None) -> None:
        # A decline does not say which source it came from: the one txn-cdc source when the
        # query has one (the usual case), else the first.
        target = next(iter(self.sources.values()), None) if self.sources else None
        if target is None:
            target = self.sources.setdefault("0", _Source(""))
        target.held = {**held, "at": at}

    def _completed(self, event: CompletedEvent) -> None:
        self.completed += 1
        self.rows += event.rows or 0
        if self.last_completed is None or event.checkpoint >= self.last_completed:
            self.last_completed = event.checkpoint
            self.last_completed_at = event.at
        if event.duration_ms is not None:
            self.durations.observe(event.duration_ms / 1000)
        newest: dict[str, float] = {}
        for index, source in enumerate(event.sources):
            connector = source.get("connector")
            status = source.get("status")
            if connector is None and isinstance(status, Mapping):
                connector = status.get("connector")
            if connector is None and "heldBack" not in source:
                continue  # not a txn-cdc source: nothing it reports is known here
            known = self.sources.setdefault(str(index), _Source(str(connector or "")))
            if connector:
                known.connector = str(connector)
            known.status = status if isinstance(status, Mapping) else None
            held = source.get("heldBack")
            known.held = {**held, "at": event.at} if isinstance(held, Mapping) else None
            commit = _num(source.get("newestCommitMs"))
            if commit is not None:
                newest[str(index)] = commit
                previous = self._newest_completed_ms.get(str(index))
                self._newest_completed_ms[str(index)] = max(commit, previous or commit)
        self._unpublished[event.checkpoint] = (event.rows or 0, _ended_at(event), newest)
        while len(self._unpublished) > MAX_UNPUBLISHED:  # a sink that never publishes
            del self._unpublished[min(self._unpublished)]

    def _published(self, event: PublishedEvent) -> None:
        self._publishes = True
        sink = self.sinks.setdefault(event.table, _Sink())
        sink.published += 1
        if sink.last is None or event.checkpoint > sink.last:
            sink.last = event.checkpoint
        this = self._unpublished.get(event.checkpoint)
        if this is not None:
            rows, ended, _ = this
            sink.rows += rows
            if ended is not None and event.at is not None:
                sink.latency.observe(max(0.0, event.at - ended))
        # Everything up to this checkpoint is visible now, with the newest commits it carried.
        commits: dict[str, float] = {}
        for checkpoint in sorted(c for c in self._unpublished if c <= event.checkpoint):
            for index, commit in self._unpublished.pop(checkpoint)[2].items():
                commits[index] = max(commit, commits.get(index, commit))
        for index, commit in commits.items():
            known = self.sources.get(index)
            if known is not None:
                previous = known.newest_published_ms
                known.newest_published_ms = max(commit, previous or commit)

    # -- values at one moment -----------------------------------------------------------------

    def families(self, query: str, now: float) -> dict[str, Family]:
        """The query's samples as of ``now`` (epoch seconds), by metric name.

        All but ``spark_ckpt_query_active``, which the exporter knows from the listener.
        """
        out = {spec.name: Family(spec) for spec in METRICS}

        def put(name: str, labels: tuple[str, ...], value: float | None) -> None:
            if value is not None:
                out[name].samples[labels] = value

        q = (query,)
        put("spark_ckpt_restarts_total", q, self.restarts)
        for reason, count in self.failures.items():
            put("spark_ckpt_failures_total", (query, reason), count)
        for (kind, reason), count in self.declines.items():
            put("spark_ckpt_declines_total", (query, kind, reason), count)
        put("spark_ckpt_batches_completed_total", q, self.completed)
        put("spark_ckpt_rows_completed_total", q, self.rows)
        put("spark_ckpt_last_completed_batch", q, self.last_completed)
        put("spark_ckpt_last_completed_timestamp_seconds", q, self.last_completed_at)
        if self.completed:
            self._histogram(out["spark_ckpt_checkpoint_duration_seconds"], q, self.durations)
        for table, sink in self.sinks.items():
            labels = (query, table)
            put("spark_ckpt_batches_published_total", labels, sink.published)
            put("spark_ckpt_rows_published_total", labels, sink.rows)
            put("spark_ckpt_last_published_batch", labels, sink.last)
            self._histogram(out["spark_ckpt_publish_latency_seconds"], labels, sink.latency)
        for index, source in self.sources.items():
            self._source(put, (query, index, source.connector), source, index, now)
        return out

    @staticmethod
    def _histogram(family: Family, labels: tuple[str, ...], histogram: _Histogram) -> None:
        family.samples[labels] = histogram.total
        family.buckets[labels] = histogram.cumulative()

    def _source(
        self, put: Any, labels: tuple[str, str, str], source: _Source, index: str, now: float
    ) -> None:
        commit_ms = (
            source.newest_published_ms if self._publishes else self._newest_completed_ms.get(index)
        )
        if commit_ms is not None:
            put("spark_ckpt_newest_published_commit_timestamp_seconds", labels, commit_ms / 1000)
            put("spark_ckpt_freshness_seconds", labels, max(0.0, now - commit_ms / 1000))
        held = source.held
        if held is None:
            put("spark_ckpt_held_back_changes", labels, 0.0)
            put("spark_ckpt_held_back_transactions", labels, 0.0)
            put("spark_ckpt_held_back_oldest_age_seconds", labels, 0.0)
            put("spark_ckpt_held_back_stalled_seconds", labels, 0.0)
        else:
            put("spark_ckpt_held_back_changes", labels, _num(held.get("changes")))
            put("spark_ckpt_held_back_transactions", labels, _num(held.get("transactions")))
            since, moved = _num(held.get("sinceMs")), _num(held.get("lastProgressMs"))
            if since is not None:
                put("spark_ckpt_held_back_oldest_age_seconds", labels, max(0.0, now - since / 1000))
            if moved is not None:
                put("spark_ckpt_held_back_stalled_seconds", labels, max(0.0, now - moved / 1000))
        status = source.status or {}
        put("spark_ckpt_source_lag_seconds", labels, _num(status.get("lagSeconds")))
        reported = status.get("behind")
        behind: Mapping[str, Any] = reported if isinstance(reported, Mapping) else {}
        put(
            "spark_ckpt_source_lag_bytes",
            labels,
            _num(status.get("lagBytes")) if "lagBytes" in status else _num(behind.get("bytes")),
        )
        put("spark_ckpt_source_lag_files", labels, _num(behind.get("files")))
        put("spark_ckpt_source_lag_records", labels, _num(behind.get("records")))
        skipped = status.get("skipped")
        if isinstance(skipped, Mapping):
            for kind, count in skipped.items():
                put("spark_ckpt_source_skipped_records_total", (*labels, str(kind)), _num(count))
        snapshot = status.get("snapshot")
        if isinstance(snapshot, Mapping):
            for key, name in (
                ("rowsRead", "rows_read"),
                ("rowsEstimated", "rows_estimated"),
                ("tables", "tables"),
                ("tablesDone", "tables_done"),
                ("chunksDone", "chunks_done"),
                ("chunksPending", "chunks_pending"),
            ):
                put(f"spark_ckpt_snapshot_{name}", labels, _num(snapshot.get(key)))
            table = snapshot.get("currentTable")
            put("spark_ckpt_snapshot_in_progress", (*labels, str(table or "")), 1.0)
        slot = status.get("slot")
        if slot is not None and (status.get("walStatus") or "retainedBytes" in status):
            slot_labels = (labels[0], index, str(slot))
            put(
                "spark_ckpt_replication_slot_retained_wal_bytes",
                slot_labels,
                _num(status.get("retainedBytes")),
            )
            put(
                "spark_ckpt_replication_slot_safe_wal_size_bytes",
                slot_labels,
                _num(status.get("safeWalSize")),
            )
            current = status.get("walStatus")
            if isinstance(current, str):
                for value in sorted({*WAL_STATUSES, current}):
                    put(
                        "spark_ckpt_replication_slot_wal_status",
                        (*slot_labels, value),
                        1.0 if value == current else 0.0,
                    )


def _ended_at(event: CompletedEvent) -> float | None:
    """When the completing batch ended (trigger time plus duration), else when recorded."""
    ended = batch_ended_at(event.triggered_at, event.duration_ms)
    return event.at if ended is None else ended
