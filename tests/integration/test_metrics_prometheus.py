"""A real Prometheus scrapes a running query's endpoint; PromQL sees what the history shows.

Prometheus is built from its Go module on first use (``harness.servers.prometheus``, minutes on
two cores), so this is in the soak tier; ``test_metrics_endpoint`` runs the same query in the
test command with ``prometheus_client``'s own parser instead. The server also loads the alert
rules users import (``docs/monitoring/alerts.yml``): every rule must load and evaluate.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from conftest import wait_until
from test_metrics_endpoint import NAME, change_log

import spark_ckpt
from harness.servers.prometheus import PrometheusServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "monitoring" / "alerts.yml"


@pytest.mark.soak
def test_prometheus_scrapes_the_endpoint_and_promql_sees_the_held_back_query(
    spark: SparkSession, tmp_path: Path
) -> None:
    """PromQL: 2 changes held back, freshness from 729's commit, the age growing; rules load."""
    commit_ms = int((time.time() - 120) * 1000)
    change_log(tmp_path / "log", commit_ms)
    spark.conf.set("spark.ckpt.metrics.port", "0")
    control = spark_ckpt.install(spark)
    server: PrometheusServer | None = None
    try:
        assert control.metrics is not None
        assert control.metrics.port
        server = PrometheusServer(
            tmp_path / "prometheus", [f"127.0.0.1:{control.metrics.port}"], [ALERTS]
        )
        server.start()
        query = (
            spark.readStream.format("txn-cdc")
            .option("connector", "debezium-json")
            .option("softDeclineTimeout", "10min")
            .load(str(tmp_path / "log"))
            .writeStream.format("delta-2pc")
            .queryName(NAME)
            .option("path", str(tmp_path / "table"))
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:

            def value(promql: str) -> float | None:
                result = server.query(promql)
                return float(result[0]["value"][1]) if result else None

            held = f'spark_ckpt_held_back_changes{{query="{NAME}",connector="debezium-json"}}'
            wait_until(lambda: value(held) == 2, 90, "Prometheus scraped 730's 2 changes held")
            assert server.targets_health() == ["up"]
            freshness = value(f'spark_ckpt_freshness_seconds{{query="{NAME}"}}')
            assert freshness is not None
            assert freshness >= time.time() - commit_ms / 1000 - 5
            published = value(f'spark_ckpt_batches_published_total{{query="{NAME}"}}')
            assert published is not None
            assert published >= 1
            # The held-back age grows while the query stalls: its increase over a few scrapes.
            age = f'spark_ckpt_held_back_oldest_age_seconds{{query="{NAME}"}}'
            time.sleep(5)
            grew = value(f"delta({age}[4s])")
            assert grew is not None
            assert grew > 2
            wait_until(
                lambda: all(r["health"] == "ok" for r in server.rules()) and bool(server.rules()),
                30,
                "every alert rule loaded and evaluated",
            )
        finally:
            query.stop()
    finally:
        if server is not None:
            server.stop()
        control.stop_metrics()
        spark.conf.unset("spark.ckpt.metrics.port")
