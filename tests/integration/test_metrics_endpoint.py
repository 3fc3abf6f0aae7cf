"""The metrics endpoint of a running query, scraped and read with Prometheus' own parser.

One change log: transaction 729 complete (committed two minutes ago), then 730 ended but with
one of its three events never written, so the query publishes 729 and then holds 730 back
(``softDeclineTimeout`` long enough that it only stalls). The scrape must say what the history
and ``spark-ckpt status`` say: freshness measured from 729's commit, 2 changes in 1 transaction
held back, and an age of the held-back data that grows while nothing moves. Then a PostgreSQL
table read by an incremental snapshot in chunks: its progress and the slot, as status shows them.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import one_plugin, wait_until
from prometheus_client.parser import text_string_to_metric_families
from test_postgres_cdc import plain_query, sql

import spark_ckpt
from spark_ckpt import cli
from spark_ckpt.model.events import CompletedEvent, PublishedEvent
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NAME = "metrics_orders"
SOURCE = {"query": NAME, "source": "0", "connector": "debezium-json"}

Scrape = dict[str, list[tuple[dict[str, str], float]]]


def change_log(log: Path, commit_ms: int) -> None:
    """729: one change, complete; 730: ended with 3 change events, of which 2 were written."""
    change = {"op": "c", "before": None, "source": {"schema": "shop", "table": "orders"}}

    def event(txn: str, n: int, ts: int) -> dict[str, Any]:
        return {
            **change,
            "source": {**change["source"], "ts_ms": ts},
            "after": {"id": n},
            "transaction": {"id": txn, "total_order": n, "data_collection_order": n},
        }

    records: list[dict[str, Any]] = [
        {"status": "BEGIN", "id": "729", "ts_ms": commit_ms},
        event("729", 1, commit_ms),
        {"status": "END", "id": "729", "event_count": 1, "ts_ms": commit_ms},
        {"status": "BEGIN", "id": "730", "ts_ms": commit_ms + 1000},
        event("730", 1, commit_ms + 1000),
        event("730", 2, commit_ms + 1000),
        {"status": "END", "id": "730", "event_count": 3, "ts_ms": commit_ms + 1000},
    ]
    log.mkdir()
    (log / "0000000001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def scrape(port: int) -> Scrape:
    """GET /metrics, parsed by prometheus_client's parser: sample name -> (labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: Scrape = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def one(samples: Scrape, name: str, **labels: str) -> float | None:
    """The value of the one sample of ``name`` whose labels include ``labels`` (None: none)."""
    found = [v for have, v in samples.get(name, []) if labels.items() <= have.items()]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def status(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert cli.main(["status", str(checkpoint), "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.quick
def test_a_running_querys_endpoint_shows_what_its_history_and_status_show(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Freshness from 729's commit, 730's 2 held-back changes, and their age growing."""
    commit_ms = int((time.time() - 120) * 1000)
    change_log(tmp_path / "log", commit_ms)
    checkpoint = tmp_path / "ckpt"
    spark.conf.set("spark.ckpt.metrics.port", "0")
    control = spark_ckpt.install(spark)
    try:
        assert control.metrics is not None
        port = control.metrics.port
        assert port
        query = (
            spark.readStream.format("txn-cdc")
            .option("connector", "debezium-json")
            .option("softDeclineTimeout", "10min")
            .load(str(tmp_path / "log"))
            .writeStream.format("delta-2pc")
            .queryName(NAME)
            .option("path", str(tmp_path / "table"))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            history = HistoryLog(SparkCheckpoint(str(checkpoint)))

            def shown() -> bool:
                s = scrape(port)
                published = one(s, "spark_ckpt_batches_published_total", query=NAME) or 0
                return published >= 1 and one(s, "spark_ckpt_held_back_changes", **SOURCE) == 2

            wait_until(shown, 90, "a published batch and 730's changes held back on the endpoint")
            assert control.metrics.flush()
            before = time.time()
            samples = scrape(port)
            after = time.time()
            state = status(checkpoint, capsys)
            events = history.events()

            # Freshness: now minus the newest published commit, 729's END, as the history has it.
            published = [e.checkpoint for e in events if isinstance(e, PublishedEvent)]
            [carried] = [
                s.get("newestCommitMs")
                for e in events
                if isinstance(e, CompletedEvent) and e.checkpoint == max(published)
                for s in e.sources
            ]
            assert carried == commit_ms
            freshness = one(samples, "spark_ckpt_freshness_seconds", **SOURCE)
            assert freshness is not None
            assert before - commit_ms / 1000 - 1 <= freshness <= after - commit_ms / 1000 + 1
            assert one(
                samples, "spark_ckpt_newest_published_commit_timestamp_seconds", **SOURCE
            ) == pytest.approx(commit_ms / 1000)
            assert one(samples, "spark_ckpt_batches_published_total", query=NAME) == len(published)
            assert (
                one(samples, "spark_ckpt_last_completed_batch", query=NAME)
                == state["lastCompleted"]
            )
            assert one(samples, "spark_ckpt_query_active", query=NAME) == 1

            # Held back: what status shows.
            [held] = state["heldBack"]
            assert one(samples, "spark_ckpt_held_back_changes", **SOURCE) == held["changes"] == 2
            assert (
                one(samples, "spark_ckpt_held_back_transactions", **SOURCE) == held["transactions"]
            )
            age = one(samples, "spark_ckpt_held_back_oldest_age_seconds", **SOURCE)
            assert age is not None
            assert before - held["sinceMs"] / 1000 - 1 <= age <= after - held["sinceMs"] / 1000 + 1

            # Stalled: nothing completes, and the age grows between two scrapes.
            time.sleep(2.5)
            later = scrape(port)
            assert one(later, "spark_ckpt_last_completed_batch", query=NAME) == one(
                samples, "spark_ckpt_last_completed_batch", query=NAME
            )
            grown = one(later, "spark_ckpt_held_back_oldest_age_seconds", **SOURCE)
            assert grown is not None
            assert grown - age >= 2.0
            stalled = one(later, "spark_ckpt_held_back_stalled_seconds", **SOURCE)
            assert stalled is not None
            assert stalled >= 2.0
            assert one(later, "spark_ckpt_held_back_changes", **SOURCE) == 2
        finally:
            query.stop()
        wait_until(
            lambda: one(scrape(port), "spark_ckpt_query_active", query=NAME) == 0,
            30,
            "the stopped query shown as not active",
        )
    finally:
        control.stop_metrics()
        spark.conf.unset("spark.ckpt.metrics.port")


@one_plugin
def test_snapshot_progress_and_the_slot_on_the_endpoint_are_what_status_shows(
    spark: SparkSession,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An incremental snapshot in chunks: rows read, estimate, chunks and the slot, as status."""
    sql(
        pg_dsn,
        "CREATE TABLE snap (id int PRIMARY KEY, v text)",
        "INSERT INTO snap SELECT g, repeat('x', 20) FROM generate_series(1, 6000) g",
        "ANALYZE snap",
    )
    spark.conf.set("spark.ckpt.metrics.port", "0")
    control = spark_ckpt.install(spark)
    try:
        assert control.metrics is not None
        port = control.metrics.port
        assert port
        query = plain_query(
            spark,
            pg_dsn,
            tmp_path,
            "metrics_snap",
            "public.snap",
            pg_plugin,
            {"processingTime": "1 second"},
            snapshot="incremental",
            snapshotChunkRows="500",
            snapshotParallelism="1",
            maxChangesPerTrigger="500",
        )
        source = {"connector": "postgres", "source": "0"}
        try:
            seen: dict[str, Any] = {}

            def agreed() -> bool:
                # A scrape and the status of the same newest completed batch, mid-snapshot.
                assert control.metrics is not None
                control.metrics.flush()
                samples = scrape(port)
                [shown] = status(tmp_path / "ckpt", capsys)["sources"] or [None]
                if shown is None or shown.get("snapshot") is None:
                    return False
                if one(samples, "spark_ckpt_last_completed_batch") != shown["checkpoint"]:
                    return False  # a batch completed in between: look again
                seen.update(samples=samples, shown=shown)
                return True

            wait_until(agreed, 120, "a scrape and status agreeing on a batch mid-snapshot")
            samples, shown = seen["samples"], seen["shown"]
            snapshot = shown["snapshot"]
            for name, key in (
                ("rows_read", "rowsRead"),
                ("rows_estimated", "rowsEstimated"),
                ("tables", "tables"),
                ("tables_done", "tablesDone"),
                ("chunks_done", "chunksDone"),
                ("chunks_pending", "chunksPending"),
            ):
                assert one(samples, f"spark_ckpt_snapshot_{name}", **source) == snapshot[key], name
            table = snapshot["currentTable"] or ""
            assert one(samples, "spark_ckpt_snapshot_in_progress", **source, table=table) == 1
            slot = {"slot": "metrics_snap", "source": "0"}
            retained = one(samples, "spark_ckpt_replication_slot_retained_wal_bytes", **slot)
            assert retained == shown["retainedBytes"]
            wal_status = {**slot, "wal_status": shown["walStatus"]}
            assert one(samples, "spark_ckpt_replication_slot_wal_status", **wal_status) == 1
            assert one(samples, "spark_ckpt_source_lag_bytes", **source) == shown["lagBytes"]
        finally:
            query.stop()
    finally:
        control.stop_metrics()
        spark.conf.unset("spark.ckpt.metrics.port")
