"""The monitoring dashboard's panels, drawn from a real Prometheus that scraped a real run.

Grafana is not available on these machines (no Debian package, and its UI needs a browser to be
photographed), so this draws what ``docs/monitoring/grafana-dashboard.json`` shows instead: every
panel's own PromQL, asked of a real Prometheus (``/api/v1/query_range``, as Grafana asks it) that
scraped a real query's endpoint for the run's minutes, one matplotlib chart per panel, placed on
the dashboard's own grid (``gridPos``). ``$query`` matches every query and
``$__rate_interval`` is 15 s (this script's choice: enough 1 s scrapes for a steady rate).

The run (about three minutes): a throwaway PostgreSQL with two tables; ``txn-cdc``
(``connector=postgres``, pgoutput, ``snapshot=incremental`` in chunks of 2,000 rows) into a
``delta-2pc`` mirror under ``spark_ckpt.install`` with the metrics endpoint on. The snapshot's
chunks are read while a writer commits orders with their items at a steady rate, then a burst,
then nothing for a while (freshness grows as the source goes quiet).

Run: ``.venv/bin/python bench/dashboard_picture.py [--out docs/monitoring/dashboard.png]``.
Prometheus is built from its Go module on first use (``harness.servers.prometheus``, minutes).
Prints one JSON line: the run's figures and which panels had data.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import psycopg

import spark_ckpt
from harness.servers.postgres import PgCluster
from harness.servers.prometheus import PrometheusServer

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "docs" / "monitoring" / "grafana-dashboard.json"
QUERY = "shop-mirror"
STEP_S = 2
RATE_INTERVAL = "15s"
SNAPSHOT_ROWS = 60_000


def write_workload(dsn: str, stop: threading.Event, phases: list[tuple[float, float]]) -> int:
    """Commit orders with 1-4 items each at each phase's rate for its seconds; how many.

    ``phases``: ``(transactions per second, seconds)``; a rate of 0 is a quiet spell.
    """
    rng = random.Random(7)
    committed = 0
    next_id = SNAPSHOT_ROWS + 1
    with psycopg.connect(dsn) as conn:
        for rate, seconds in phases:
            began = time.monotonic()
            while time.monotonic() - began < seconds and not stop.is_set():
                if rate == 0:
                    time.sleep(0.2)
                    continue
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO orders VALUES (%s, %s, %s)",
                        (next_id, f"c{rng.randrange(50)}", rng.randrange(100, 10_000) / 100),
                    )
                    for item in range(rng.randint(1, 4)):
                        conn.execute(
                            "INSERT INTO items VALUES (%s, %s, %s)",
                            (next_id * 10 + item, next_id, rng.randrange(1, 9)),
                        )
                    if rng.random() < 0.3:
                        conn.execute(
                            "UPDATE orders SET total = total + 1 WHERE id = %s",
                            (rng.randrange(1, next_id),),
                        )
                committed += 1
                next_id += 1
                time.sleep(1 / rate)
    return committed


def create_tables(dsn: str) -> None:
    """Two tables, ``orders`` with :data:`SNAPSHOT_ROWS` rows to snapshot (driver, once)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer text, total numeric)")
        conn.execute("CREATE TABLE items (id bigint PRIMARY KEY, order_id bigint, qty int)")
        conn.execute(
            "INSERT INTO orders SELECT g, 'c' || (g % 50), (g % 997) / 10.0 "
            f"FROM generate_series(1, {SNAPSHOT_ROWS}) AS g"
        )
        # The snapshot's progress is a share of the planner's row estimate (pg_class.reltuples)
        # of every captured table; a table autovacuum has not analyzed yet has none.
        conn.execute("ANALYZE orders, items")


def promql(expr: str) -> str:
    """A panel's expression with the dashboard's variables filled in as this run needs."""
    return expr.replace("$query", ".+").replace("$__rate_interval", RATE_INTERVAL)


def series_label(metric: dict[str, str], legend: str) -> str:
    """Grafana's ``legendFormat`` (``{{label}}``) for one series, or its labels."""
    if legend:
        text = legend
        for key, value in metric.items():
            text = text.replace("{{" + key + "}}", value)
        return text
    shown = {k: v for k, v in metric.items() if k not in ("__name__", "instance", "job", "query")}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or metric.get("__name__", "")


def draw(panels: list[dict[str, Any]], data: dict[int, list[Any]], began: float, out: Path) -> None:
    """Each panel at its ``gridPos`` (24 columns), rows as headings; saved to ``out``."""
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    figure = plt.figure(figsize=(20, bottom * 0.42))
    grid = figure.add_gridspec(bottom, 24, hspace=2.2, wspace=1.6, top=0.975, bottom=0.02)
    for index, panel in enumerate(panels):
        pos = panel["gridPos"]
        if panel.get("type") == "row":
            axis = figure.add_subplot(grid[pos["y"], :])
            axis.axis("off")
            axis.text(0, 0.5, panel["title"], fontsize=13, fontweight="bold", va="center")
            continue
        rows, columns = slice(pos["y"], pos["y"] + pos["h"]), slice(pos["x"], pos["x"] + pos["w"])
        axis = figure.add_subplot(grid[rows, columns])
        axis.set_title(panel["title"], fontsize=10, loc="left")
        axis.tick_params(labelsize=8)
        lines = data.get(index, [])
        for label, points in lines:
            axis.plot([t - began for t, _ in points], [v for _, v in points], label=label, lw=1.3)
        if lines:
            axis.legend(fontsize=7, loc="upper left", frameon=False)
        else:
            axis.text(0.5, 0.5, "No data", ha="center", va="center", color="grey")
        axis.set_xlabel("seconds into the run", fontsize=8)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        if unit and unit not in ("short", "none"):
            axis.set_ylabel(unit, fontsize=8)
        axis.grid(alpha=0.3)
    figure.suptitle(
        "spark-ckpt dashboard (docs/monitoring/grafana-dashboard.json): each panel's PromQL "
        "on a real Prometheus, one run of bench/dashboard_picture.py",
        fontsize=12,
        y=0.995,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=80, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "monitoring" / "dashboard.png")
    args = parser.parse_args()
    panels: list[dict[str, Any]] = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dashboard-")))
        cluster = PgCluster(tempfile.mkdtemp(prefix="dashboard-pg-")).start()
        stack.callback(shutil.rmtree, cluster.workdir, ignore_errors=True)
        stack.callback(cluster.stop)
        dsn = cluster.dsn()
        create_tables(dsn)
        spark = spark_ckpt.local_session("bench-dashboard", conf={"spark.ckpt.metrics.port": "0"})
        spark.sparkContext.setLogLevel("ERROR")
        control = spark_ckpt.install(spark)
        if control.metrics is None or not control.metrics.port:
            raise SystemExit("the metrics endpoint did not start (spark.ckpt.metrics.port=0)")
        server = PrometheusServer(work / "prometheus", [f"127.0.0.1:{control.metrics.port}"])
        server.start()
        stack.callback(server.stop)
        began = time.time()
        query = (
            spark.readStream.format("txn-cdc")
            .option("connector", "postgres")
            .option("dsn", dsn)
            .option("slot", "dashboard")
            .option("tables", "public.orders,public.items")
            .option("snapshot", "incremental")
            .option("snapshotChunkRows", "2000")
            .option("snapshotDir", str(work / "spill"))
            .option("columnTypes", "true")
            .load()
            .writeStream.format("delta-2pc")
            .queryName(QUERY)
            .option("mode", "mirror")
            .option("path", str(work / "mirror"))
            .option("checkpointLocation", str(work / "ckpt"))
            .trigger(processingTime="1 second")
            .start()
        )
        stop = threading.Event()
        counts: list[int] = []
        phases = [(15.0, 80.0), (60.0, 25.0), (0.0, 40.0), (15.0, 30.0)]
        writer = threading.Thread(
            target=lambda: counts.append(write_workload(dsn, stop, phases)), daemon=True
        )
        writer.start()
        writer.join(sum(s for _, s in phases) + 120)
        stop.set()
        time.sleep(10)  # the last batches and scrapes
        ended = time.time()
        batches = len(query.recentProgress)
        query.stop()
        data: dict[int, list[Any]] = {}
        for index, panel in enumerate(panels):
            for target in panel.get("targets", []):
                result = server.query_range(promql(target["expr"]), began, ended, STEP_S)
                for series in result:
                    points = [(float(t), float(v)) for t, v in series["values"]]
                    label = series_label(series["metric"], target.get("legendFormat", ""))
                    data.setdefault(index, []).append((label, points))
        draw(panels, data, began, args.out)
        charts = [p["title"] for p in panels if p.get("type") != "row"]
        empty = [
            p["title"] for i, p in enumerate(panels) if p.get("type") != "row" and i not in data
        ]
        print(
            json.dumps(
                {
                    "bench": "dashboard_picture",
                    "seconds": round(ended - began),
                    "transactions": counts[0] if counts else None,
                    "batches": batches,
                    "panels": len(charts),
                    "panels_without_data": empty,
                    "out": str(args.out),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
