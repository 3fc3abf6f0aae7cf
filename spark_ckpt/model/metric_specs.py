"""The metrics spark-ckpt exports, declared: name, type, labels, meaning and origin (pure).

:data:`METRICS` declares every metric. The exporter (:mod:`spark_ckpt.spark.metrics`) serves
them, :mod:`spark_ckpt.model.metrics` computes their values from a query's history, and the
documentation's table is rendered from them, so the three cannot drift.

Names follow Prometheus' conventions: ``spark_ckpt_`` prefix, base units (seconds, bytes) in
the name, ``_total`` for counters. Labels: ``query`` (the query's name, else its checkpoint
location), ``source`` (the source's index in the query, ``0`` for the first) with
``connector`` (``debezium-json``, ``kafka``, ``postgres``, ``mysql``), ``table`` (the sink's
Delta table), ``kind``/``reason`` where a count is split by why.

Pure Python: no Spark, no Prometheus client, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "BY_NAME",
    "DURATION_BUCKETS",
    "METRICS",
    "WAL_STATUSES",
    "Kind",
    "MetricSpec",
]

Kind = Literal["gauge", "counter", "histogram"]

_Q = ("query",)
_S = ("query", "source", "connector")
_SLOT = ("query", "source", "slot")


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric.

    Attributes
    ----------
    name
        The Prometheus name (a counter's with its ``_total``).
    kind
        ``gauge``, ``counter`` or ``histogram``.
    help
        What it measures (the exposition's HELP line and the documentation).
    labels
        Its label names, in order.
    origin
        Where the value comes from, for the documentation.
    """

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]
    origin: str


def _spec(name: str, kind: Kind, labels: tuple[str, ...], help: str, origin: str) -> MetricSpec:
    return MetricSpec(name, kind, help, labels, origin)


METRICS: tuple[MetricSpec, ...] = (
    # -- the query ----------------------------------------------------------------------------
    _spec(
        "spark_ckpt_query_active",
        "gauge",
        _Q,
        "1 while a run of the query is active in this driver, 0 once it ended",
        "the listener's query started/terminated events",
    ),
    _spec(
        "spark_ckpt_restarts_total",
        "counter",
        _Q,
        "restarts of the supervised query (attempts after the first)",
        "history: start events",
    ),
    _spec(
        "spark_ckpt_failures_total",
        "counter",
        (*_Q, "reason"),
        "failures by FailureReason (CHECKPOINT_EXPIRED, PUBLISH_FAILED, QUERY_FAILED, ...)",
        "history: failure events",
    ),
    _spec(
        "spark_ckpt_declines_total",
        "counter",
        (*_Q, "kind", "reason"),
        "checkpoints declined by a source, by kind (soft, hard) and reason (timeout, "
        "snapshot, incomplete_transaction, split_transaction, unit_boundary, other)",
        "history: decline events",
    ),
    _spec(
        "spark_ckpt_batches_completed_total",
        "counter",
        _Q,
        "checkpoints (micro-batches) completed",
        "history: completed events (progress)",
    ),
    _spec(
        "spark_ckpt_rows_completed_total",
        "counter",
        _Q,
        "input rows of the completed checkpoints",
        "progress: numInputRows",
    ),
    _spec(
        "spark_ckpt_last_completed_batch",
        "gauge",
        _Q,
        "the newest completed checkpoint's batch id",
        "progress: batchId",
    ),
    _spec(
        "spark_ckpt_last_completed_timestamp_seconds",
        "gauge",
        _Q,
        "when the newest checkpoint completed (epoch seconds)",
        "history: completed events",
    ),
    _spec(
        "spark_ckpt_checkpoint_duration_seconds",
        "histogram",
        _Q,
        "how long the batches that completed checkpoints ran",
        "progress: batchDuration",
    ),
    # -- the sink -----------------------------------------------------------------------------
    _spec(
        "spark_ckpt_batches_published_total",
        "counter",
        (*_Q, "table"),
        "checkpoints published as a Delta table version (delta-2pc)",
        "history: published events",
    ),
    _spec(
        "spark_ckpt_rows_published_total",
        "counter",
        (*_Q, "table"),
        "input rows of the published checkpoints",
        "history: completed + published events",
    ),
    _spec(
        "spark_ckpt_last_published_batch",
        "gauge",
        (*_Q, "table"),
        "the newest published checkpoint's batch id",
        "history: published events",
    ),
    _spec(
        "spark_ckpt_publish_latency_seconds",
        "histogram",
        (*_Q, "table"),
        "from the end of a checkpoint's batch to its publication (recovery after a crash "
        "shows the whole wait)",
        "history: completed + published events",
    ),
    # -- each source --------------------------------------------------------------------------
    _spec(
        "spark_ckpt_freshness_seconds",
        "gauge",
        _S,
        "now minus the commit time of the newest source transaction published (completed, "
        "for a query whose sink publishes nothing); computed when scraped, so it grows "
        "while the query stalls",
        "progress: the source's newestCommitMs, with the checkpoint that published it",
    ),
    _spec(
        "spark_ckpt_newest_published_commit_timestamp_seconds",
        "gauge",
        _S,
        "the commit time of the newest source transaction published (epoch seconds)",
        "progress: the source's newestCommitMs",
    ),
    _spec(
        "spark_ckpt_source_lag_seconds",
        "gauge",
        _S,
        "the source's own lag: age of the oldest transaction read but not delivered "
        "(postgres, mysql)",
        "progress: status.lagSeconds",
    ),
    _spec(
        "spark_ckpt_source_lag_bytes",
        "gauge",
        _S,
        "bytes behind: WAL between the server's position and the slot's confirmed one "
        "(postgres), log bytes not yet read (debezium-json)",
        "progress: status.lagBytes, status.behind.bytes",
    ),
    _spec(
        "spark_ckpt_source_lag_files",
        "gauge",
        _S,
        "log files not yet read completely (debezium-json)",
        "progress: status.behind.files",
    ),
    _spec(
        "spark_ckpt_source_lag_records",
        "gauge",
        _S,
        "records behind the latest offsets, over all partitions (kafka)",
        "progress: status.behind.records",
    ),
    _spec(
        "spark_ckpt_held_back_changes",
        "gauge",
        _S,
        "change events read but held back (incomplete transactions, a snapshot in progress)",
        "progress or decline: heldBack.changes",
    ),
    _spec(
        "spark_ckpt_held_back_transactions",
        "gauge",
        _S,
        "open transactions holding them (a snapshot in progress counts as one)",
        "progress or decline: heldBack.transactions",
    ),
    _spec(
        "spark_ckpt_held_back_oldest_age_seconds",
        "gauge",
        _S,
        "how long the oldest held-back unit has been held back; computed when scraped",
        "progress or decline: heldBack.sinceMs",
    ),
    _spec(
        "spark_ckpt_held_back_stalled_seconds",
        "gauge",
        _S,
        "since the held-back data last made progress; computed when scraped",
        "progress or decline: heldBack.lastProgressMs",
    ),
    _spec(
        "spark_ckpt_source_skipped_records_total",
        "counter",
        (*_S, "kind"),
        "records the source read and dropped in this run, by kind (repeats: changes "
        "Debezium wrote again after a restart; tombstones, heartbeats, schemaChanges, lost)",
        "progress: status.skipped",
    ),
    _spec(
        "spark_ckpt_snapshot_rows_read",
        "gauge",
        _S,
        "rows the snapshot has read so far, over all its tables",
        "status.snapshot.rowsRead",
    ),
    _spec(
        "spark_ckpt_snapshot_rows_estimated",
        "gauge",
        _S,
        "the server's estimate of the snapshot's rows (absent when it has none)",
        "status.snapshot.rowsEstimated",
    ),
    _spec(
        "spark_ckpt_snapshot_tables",
        "gauge",
        _S,
        "tables the snapshot reads",
        "status.snapshot.tables",
    ),
    _spec(
        "spark_ckpt_snapshot_tables_done",
        "gauge",
        _S,
        "tables the snapshot has read completely",
        "status.snapshot.tablesDone",
    ),
    _spec(
        "spark_ckpt_snapshot_chunks_done",
        "gauge",
        _S,
        "snapshot=incremental: chunks emitted",
        "status.snapshot.chunksDone",
    ),
    _spec(
        "spark_ckpt_snapshot_chunks_pending",
        "gauge",
        _S,
        "snapshot=incremental: chunks read or being read but not emitted yet",
        "status.snapshot.chunksPending",
    ),
    _spec(
        "spark_ckpt_snapshot_in_progress",
        "gauge",
        (*_S, "table"),
        "1 while a snapshot runs, labelled with the table it reads now",
        "status.snapshot",
    ),
    # -- a PostgreSQL replication slot --------------------------------------------------------
    _spec(
        "spark_ckpt_replication_slot_retained_wal_bytes",
        "gauge",
        _SLOT,
        "WAL the server retains for the slot",
        "status.retainedBytes",
    ),
    _spec(
        "spark_ckpt_replication_slot_safe_wal_size_bytes",
        "gauge",
        _SLOT,
        "WAL that can still be written before the slot is invalidated "
        "(max_slot_wal_keep_size; absent when unlimited)",
        "status.safeWalSize",
    ),
    _spec(
        "spark_ckpt_replication_slot_wal_status",
        "gauge",
        (*_SLOT, "wal_status"),
        "1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others",
        "status.walStatus",
    ),
)
"""Every metric the control plane exports."""

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}

DURATION_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
"""Upper bounds of the duration histograms (seconds; ``+Inf`` is added)."""

WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")
"""PostgreSQL's ``pg_replication_slots.wal_status`` values."""
