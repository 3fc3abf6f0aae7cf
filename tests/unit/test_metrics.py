"""Metrics: folded from history events, computed at scrape time, served in Prometheus' format.

The model (:mod:`spark_ckpt.model.metrics`) is pure; the exporter is run without its HTTP
server and its text is read back with ``prometheus_client``'s own parser.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from spark_ckpt.errors import ConfigError
from spark_ckpt.model.config import CkptConfig
from spark_ckpt.model.events import (
    CompletedEvent,
    DeclineEvent,
    FailureEvent,
    PublishedEvent,
    StartEvent,
)
from spark_ckpt.model.metrics import METRICS, QueryMetrics, decline_category
from spark_ckpt.spark.metrics import MetricsExporter
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog

from driver_loop import make_reader, run
from log_records import begin, change, end, write_lines

T0 = 1_800_000_000.0
TABLE = "file:///lake/orders"


def completed(
    batch: int,
    *,
    at: float,
    rows: int = 10,
    commit_ms: int | None = None,
    held: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
) -> CompletedEvent:
    connector = (status or {}).get("connector", "debezium-json")
    latest: dict[str, Any] = {"connector": connector, "heldBack": held, "status": status}
    if commit_ms is not None:
        latest["newestCommitMs"] = commit_ms
    progress = {
        "batchId": batch,
        "timestamp": "2027-01-15T08:00:00.000Z",
        "batchDuration": 1500,
        "numInputRows": rows,
        "sources": [{"description": "txn-cdc", "latestOffset": json.dumps(latest)}],
    }
    event = CompletedEvent.of_progress(progress)
    return CompletedEvent(
        event.checkpoint, event.triggered_at, event.duration_ms, event.rows, event.sources, at=at
    )


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    samples = families[name].samples
    matches = [v for k, v in samples.items() if all(lv in k for lv in labels.values())]
    assert len(matches) == 1, (name, labels, samples)
    return float(matches[0])


def test_every_metric_follows_prometheus_naming() -> None:
    """Prefixed, snake case, base units in the name, ``_total`` exactly on counters."""
    names = [spec.name for spec in METRICS]
    assert len(names) == len(set(names))
    for spec in METRICS:
        assert spec.name.startswith("spark_ckpt_")
        assert spec.name == spec.name.lower()
        assert spec.name.endswith("_total") == (spec.kind == "counter"), spec.name
        assert not spec.name.endswith(("_ms", "_milliseconds", "_kb", "_mb")), spec.name
        assert spec.help
        assert spec.labels[0] == "query"


def test_counters_fold_from_events() -> None:
    """Batches, rows, declines by category, failures by reason, restarts, publications."""
    metrics = QueryMetrics()
    metrics.observe_all(
        [
            StartEvent(0, None, at=T0),
            completed(0, at=T0 + 1, rows=7),
            DeclineEvent(1, "soft", "the cut would split transaction '9' after 2 of its 5", at=T0),
            DeclineEvent(
                1,
                "hard",
                "held-back data exceeded softDeclineTimeout=1min without progress: ...",
                at=T0 + 2,
            ),
            FailureEvent(1, "SOURCE_DECLINED_HARD", at=T0 + 2),
            StartEvent(1, 0, at=T0 + 3),
            completed(1, at=T0 + 4, rows=5),
            PublishedEvent(1, 3, TABLE, at=T0 + 5),
        ]
    )
    f = metrics.families("orders", T0 + 10)
    assert value(f, "spark_ckpt_batches_completed_total") == 2
    assert value(f, "spark_ckpt_rows_completed_total") == 12
    assert value(f, "spark_ckpt_last_completed_batch") == 1
    assert value(f, "spark_ckpt_restarts_total") == 1
    assert f["spark_ckpt_failures_total"].samples == {("orders", "SOURCE_DECLINED_HARD"): 1}
    assert f["spark_ckpt_declines_total"].samples == {
        ("orders", "soft", "split_transaction"): 1,
        ("orders", "hard", "timeout"): 1,
    }
    assert f["spark_ckpt_batches_published_total"].samples == {("orders", TABLE): 1}
    assert f["spark_ckpt_rows_published_total"].samples == {("orders", TABLE): 5}
    assert f["spark_ckpt_last_published_batch"].samples == {("orders", TABLE): 1}
    durations = f["spark_ckpt_checkpoint_duration_seconds"]
    assert durations.samples[("orders",)] == 3.0
    assert dict(durations.buckets[("orders",)])[2.5] == 2


def test_freshness_is_measured_from_the_newest_published_commit_at_scrape_time() -> None:
    """Completed but unpublished commits do not count; the gauge grows while nothing new comes."""
    metrics = QueryMetrics()
    commit = int((T0 - 30) * 1000)
    metrics.observe_all(
        [
            completed(0, at=T0, commit_ms=commit),
            PublishedEvent(0, 1, TABLE, at=T0 + 1),
            completed(1, at=T0 + 2, commit_ms=commit + 20_000),  # not published yet
        ]
    )
    labels = ("orders", "0", "debezium-json")
    for now in (T0 + 5, T0 + 65):
        f = metrics.families("orders", now)
        fresh = f["spark_ckpt_freshness_seconds"].samples[labels]
        assert fresh == pytest.approx(now - commit / 1e3)
    metrics.observe(PublishedEvent(1, 2, TABLE, at=T0 + 70))
    f = metrics.families("orders", T0 + 70)
    assert f["spark_ckpt_freshness_seconds"].samples[labels] == pytest.approx(80.0)
    stamp = f["spark_ckpt_newest_published_commit_timestamp_seconds"].samples[labels]
    assert stamp == pytest.approx(T0 - 10)


def test_held_back_age_grows_while_a_decline_holds_data_back_and_clears_with_a_batch() -> None:
    """The decline's heldBack carries sinceMs; age is now minus it; a batch without it clears."""
    metrics = QueryMetrics()
    metrics.observe(completed(0, at=T0))
    since = int(T0 * 1000)
    held = {"changes": 4, "transactions": 1, "sinceMs": since, "lastProgressMs": since + 2000}
    metrics.observe(DeclineEvent(1, "soft", "transaction '7' ... END has not been read", held))
    labels = ("orders", "0", "debezium-json")
    for wait in (10.0, 100.0):
        f = metrics.families("orders", T0 + wait)
        assert f["spark_ckpt_held_back_changes"].samples[labels] == 4
        assert f["spark_ckpt_held_back_transactions"].samples[labels] == 1
        assert f["spark_ckpt_held_back_oldest_age_seconds"].samples[labels] == wait
        assert f["spark_ckpt_held_back_stalled_seconds"].samples[labels] == wait - 2
    assert metrics.declines == {("soft", "incomplete_transaction"): 1}
    metrics.observe(completed(1, at=T0 + 200))
    f = metrics.families("orders", T0 + 300)
    assert f["spark_ckpt_held_back_changes"].samples[labels] == 0
    assert f["spark_ckpt_held_back_oldest_age_seconds"].samples[labels] == 0


def test_source_status_gives_lag_snapshot_progress_skips_and_the_slot() -> None:
    """What a connector's status reports becomes gauges labelled by source and slot."""
    status = {
        "connector": "postgres",
        "slot": "lake",
        "lagBytes": 2048,
        "retainedBytes": 4096,
        "walStatus": "extended",
        "safeWalSize": None,
        "lagSeconds": 1.5,
        "skipped": {"repeats": 3},
        "snapshot": {
            "tables": 3,
            "tablesDone": 1,
            "rowsRead": 1200,
            "rowsEstimated": 3000,
            "currentTable": "public.items",
            "chunksDone": 4,
            "chunksPending": 2,
        },
    }
    metrics = QueryMetrics()
    metrics.observe(completed(0, at=T0, status=status))
    f = metrics.families("q", T0)
    s = ("q", "0", "postgres")
    assert f["spark_ckpt_source_lag_bytes"].samples[s] == 2048
    assert f["spark_ckpt_source_lag_seconds"].samples[s] == 1.5
    assert f["spark_ckpt_source_skipped_records_total"].samples[(*s, "repeats")] == 3
    assert f["spark_ckpt_snapshot_rows_read"].samples[s] == 1200
    assert f["spark_ckpt_snapshot_rows_estimated"].samples[s] == 3000
    assert f["spark_ckpt_snapshot_chunks_pending"].samples[s] == 2
    assert f["spark_ckpt_snapshot_in_progress"].samples[(*s, "public.items")] == 1
    slot = ("q", "0", "lake")
    assert f["spark_ckpt_replication_slot_retained_wal_bytes"].samples[slot] == 4096
    assert f["spark_ckpt_replication_slot_safe_wal_size_bytes"].samples == {}
    statuses = f["spark_ckpt_replication_slot_wal_status"].samples
    assert statuses[(*slot, "extended")] == 1
    assert statuses[(*slot, "reserved")] == 0


def test_file_log_and_kafka_lag() -> None:
    """``behind`` of the file log (files, bytes) and of Kafka (records)."""
    metrics = QueryMetrics()
    behind = {"connector": "debezium-json", "behind": {"files": 2, "bytes": 900}}
    metrics.observe(completed(0, at=T0, status=behind))
    f = metrics.families("q", T0)
    assert f["spark_ckpt_source_lag_files"].samples[("q", "0", "debezium-json")] == 2
    assert f["spark_ckpt_source_lag_bytes"].samples[("q", "0", "debezium-json")] == 900
    metrics.observe(completed(1, at=T0, status={"connector": "kafka", "behind": {"records": 7}}))
    f = metrics.families("q", T0)
    assert f["spark_ckpt_source_lag_records"].samples[("q", "0", "kafka")] == 7


@pytest.mark.parametrize(
    ("kind", "reason", "category"),
    [
        ("soft", "Debezium's initial snapshot is being read (3 row(s) so far ...)", "snapshot"),
        ("soft", "snapshot in progress: table 1 of 2", "snapshot"),
        (
            "soft",
            "transaction '5' (first record a:1) has 2 change event(s) but its END has not "
            "been read yet",
            "incomplete_transaction",
        ),
        (
            "soft",
            "a transaction's commit is not in the binlog yet (3 changes read)",
            "incomplete_transaction",
        ),
        ("soft", "a Kafka batch ends only at a unit boundary", "unit_boundary"),
        ("hard", "soft declines exceeded softDeclineTimeout=1min: x", "timeout"),
        ("hard", "something else", "other"),
    ],
)
def test_decline_reasons_fall_into_few_categories(kind: str, reason: str, category: str) -> None:
    """Free-text reasons become a handful of label values."""
    assert decline_category(kind, reason) == category


def test_metrics_port_key() -> None:
    """Off by default on loopback; a port, 0 for a free one; anything else refused."""

    def parsed(**values: str) -> CkptConfig:
        return CkptConfig.from_conf(lambda k: values.get(k.removeprefix("spark.ckpt.metrics.")))

    assert parsed().metrics_port is None
    assert parsed().metrics_host == "127.0.0.1"
    assert parsed(port="9464").metrics_port == 9464
    assert parsed(port="0", host="0.0.0.0").metrics_host == "0.0.0.0"
    for bad in ("-1", "70000", "http"):
        with pytest.raises(ConfigError, match=r"spark\.ckpt\.metrics\.port"):
            parsed(port=bad)


def _scrape(exporter: MetricsExporter) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The exposition parsed by prometheus_client's parser: sample name -> labels -> value."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(exporter.exposition()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_exporter_continues_counters_from_the_history_and_serves_the_text_format(
    tmp_path: Path,
) -> None:
    """Events stored before it started count once; later appends are folded in as they come."""
    log = HistoryLog(SparkCheckpoint(str(tmp_path / "ckpt")))
    log.append(completed(0, at=T0, rows=3))
    log.append(FailureEvent(None, "QUERY_FAILED", at=T0 + 1))
    clock = [T0 + 10]
    exporter = MetricsExporter(serve=False, clock=lambda: clock[0])
    try:
        commit = int(T0 * 1000)
        log.append(StartEvent(1, 0))
        log.append(completed(1, at=T0 + 5, rows=4, commit_ms=commit))
        # At a time after the batch's: the history reads back in time order, and an event at
        # the real clock's now would sort before these (T0 is in 2027) whenever the exporter
        # first reads the log after all three appends.
        log.append(PublishedEvent(1, 2, TABLE, at=T0 + 6))
        other = HistoryLog(SparkCheckpoint(str(tmp_path / "other")))
        exporter.started("id-1", "orders")
        exporter.bind("id-1", "orders", log)
        assert exporter.flush()
        scraped = _scrape(exporter)
        q = (("query", "orders"),)
        assert scraped["spark_ckpt_batches_completed_total"][q] == 2
        assert scraped["spark_ckpt_rows_completed_total"][q] == 7
        assert scraped["spark_ckpt_restarts_total"][q] == 1
        assert scraped["spark_ckpt_failures_total"][(*q, ("reason", "QUERY_FAILED"))] == 1
        assert scraped["spark_ckpt_query_active"][q] == 1
        source = (("connector", "debezium-json"), ("query", "orders"), ("source", "0"))
        assert scraped["spark_ckpt_freshness_seconds"][source] == 10
        clock[0] += 50
        assert _scrape(exporter)["spark_ckpt_freshness_seconds"][source] == 60
        buckets = scraped["spark_ckpt_checkpoint_duration_seconds_bucket"]
        assert buckets[(("le", "+Inf"), ("query", "orders"))] == 2
        other.append(completed(0, at=T0))  # a second query, not bound: its location names it
        exporter.terminated("id-1")
        assert exporter.flush()
        scraped = _scrape(exporter)
        assert scraped["spark_ckpt_query_active"][q] == 0
        assert len(scraped["spark_ckpt_batches_completed_total"]) == 2
    finally:
        exporter.close()
    log.append(completed(2, at=T0 + 20))  # after close: not observed any more
    assert _scrape(exporter)["spark_ckpt_batches_completed_total"][q] == 2


def test_exporter_serves_http_on_loopback() -> None:
    """With a port (0: a free one), GET /metrics returns the exposition."""
    import urllib.request

    exporter = MetricsExporter(0, "127.0.0.1")
    try:
        assert exporter.port
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=10) as r:
            body = r.read().decode()
        names = {f.name for f in text_string_to_metric_families(body)}
        assert "spark_ckpt_freshness_seconds" in names
        assert "spark_ckpt_batches_completed" in names  # a counter's family drops _total
    finally:
        exporter.close()


MONITORING = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
_SERIES = re.compile(r"\bspark_ckpt_[a-z0-9_]+")


def _declared(series: str) -> bool:
    kinds = {spec.name: spec.kind for spec in METRICS}
    if series in kinds:
        return True
    base, _, suffix = series.rpartition("_")
    return kinds.get(base) == "histogram" and suffix in ("bucket", "sum", "count")


def test_the_dashboard_and_the_alerts_use_only_declared_metrics() -> None:
    """Every series the Grafana dashboard and the alert rules query is one the exporter serves."""
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    alerts = [r for group in rules["groups"] for r in group["rules"]]
    exprs += [r["expr"] for r in alerts]
    assert {"SparkCkptFreshnessHigh", "SparkCkptHeldBackTooLong", "SparkCkptRestarting"} <= {
        r["alert"] for r in alerts
    }
    used = {name for expr in exprs for name in _SERIES.findall(expr)}
    assert used
    assert {name for name in used if not _declared(name)} == set()


def test_the_file_log_reports_its_newest_commit_and_what_is_behind(tmp_path: Path) -> None:
    """``newestCommitMs`` is the END's ts_ms of the newest transaction a batch delivered."""
    log = tmp_path / "log"

    def transaction(txn_id: str, ts_ms: int) -> list[object]:
        return [
            begin(txn_id),
            change(txn_id, 1),
            change(txn_id, 2),
            {**end(txn_id, 2), "ts_ms": ts_ms},
        ]

    write_lines(log, "0001.jsonl", transaction("1", 5000))
    write_lines(log, "0002.jsonl", transaction("2", 9000))
    options = {"connector": "debezium-json", "path": str(log), "maxChangesPerTrigger": "2"}
    reader = make_reader(options)
    start = reader.initialOffset()
    reader.latestOffset(start, reader.getDefaultReadLimit())  # 1's two changes, not 2's
    reported = reader.reportLatestOffset()
    assert reported["newestCommitMs"] == 5000
    size = (log / "0002.jsonl").stat().st_size
    assert reported["status"]["behind"] == {"files": 1, "bytes": size}
    run(reader, options, start)
    reported = reader.reportLatestOffset()
    assert reported["newestCommitMs"] == 9000
    assert reported["status"]["behind"] == {"files": 0, "bytes": 0}
