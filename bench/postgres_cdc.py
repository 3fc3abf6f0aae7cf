"""Benchmark: changes/s through the postgres connector into delta-2pc vs raw logical decoding.

Starts a throwaway PostgreSQL cluster, creates one replication slot per measured run (slots
created at the same point decode identical contents), writes ``--transactions`` multi-row
transactions, then alternates, ``--pairs`` times:

- *raw*: ``SELECT lsn, xid, data FROM pg_logical_slot_peek_changes(...)`` with the connector's
  wal2json options, every row fetched by psycopg: what any SQL consumer of the slot pays;
- *connector*: a ``txn-cdc`` (``connector=postgres``, ``snapshot=never``) -> ``delta-2pc`` query
  with ``Trigger.availableNow`` on a fresh slot, checkpoint and table, timed from the first
  batch's trigger to the last batch's completion (the query's own startup, seconds of JVM and
  Python worker launch that do not depend on the data, is reported separately).

Prints one JSON line; the verdict is the median of the per-pair ratios connector/raw.
Run: ``scripts/bench.sh postgres`` (or ``python bench/postgres_cdc.py``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pg_cluster import PgCluster

TABLES = ("public.orders", "public.items")


def make_slots(dsn: str, names: list[str]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'wal2json')", (name,))


def write_workload(dsn: str, transactions: int, rows_per_txn: int) -> int:
    """Committed transactions of ``rows_per_txn`` inserts and one update; returns changes."""
    import psycopg

    changes = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        for txn in range(transactions):
            with conn.transaction():
                conn.execute(
                    "INSERT INTO orders VALUES (%s, %s, %s)",
                    (txn, f"{txn}.123456789", f"order {txn} with some text"),
                )
                conn.execute(
                    "INSERT INTO items SELECT %s, g, 'sku-' || g, g * 1.5 "
                    "FROM generate_series(1, %s) g",
                    (txn, rows_per_txn - 2),
                )
                conn.execute("UPDATE orders SET note = note || ' (paid)' WHERE id = %s", (txn,))
            changes += rows_per_txn
    return changes


def raw_rate(dsn: str, slot: str) -> tuple[float, int]:
    """(changes/s, changes) of one full peek of ``slot`` with every row fetched."""
    import psycopg

    from spark_ckpt.sources.wal2json import PLUGIN_OPTIONS

    options = [*PLUGIN_OPTIONS, "add-tables", ",".join(TABLES)]
    placeholders = ", ".join(["%s"] * len(options))
    with psycopg.connect(dsn, autocommit=True) as conn:
        began = time.perf_counter()
        rows = conn.execute(
            f"SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_changes("
            f"%s, NULL, NULL, {placeholders})",
            (slot, *options),
        ).fetchall()
        elapsed = time.perf_counter() - began
    changes = sum(1 for _, _, data in rows if data.startswith(('{"action":"I"', '{"action":"U"')))
    return changes / elapsed, changes


def connector_rate(
    spark: Any, control: Any, dsn: str, slot: str, workdir: Path, cap: int
) -> tuple[float, float, int]:
    """(changes/s over the batches, query startup seconds, changes) of one availableNow run."""
    began = time.perf_counter()
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "postgres")
        .option("dsn", dsn)
        .option("slot", slot)
        .option("tables", ",".join(TABLES))
        .option("snapshot", "never")
        .option("maxChangesPerTrigger", str(cap))
        .load()
        .writeStream.format("delta-2pc")
        .option("path", str(workdir / "table"))
        .option("checkpointLocation", str(workdir / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    if not control.await_termination(query, 1800):
        raise SystemExit("the connector run did not finish within 30 minutes")
    ended = time.perf_counter()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    changes = sum(int(p["numInputRows"]) for p in progress)
    # Batches run back to back: from the first data batch's trigger to the end of the last.
    batch_seconds = sum(int(p["batchDuration"]) for p in progress) / 1000
    startup = (ended - began) - batch_seconds
    return changes / batch_seconds, startup, changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=20_000)
    parser.add_argument("--rows-per-transaction", type=int, default=6)
    parser.add_argument("--max-changes-per-trigger", type=int, default=50_000)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()

    import spark_ckpt

    root = Path(tempfile.mkdtemp(prefix="spark-ckpt-bench-pg-"))
    # A directory of its own: the server may run as the postgres user, root's temp dirs are private.
    cluster = PgCluster(tempfile.mkdtemp(prefix="spark-ckpt-bench-pgdata-")).start()
    try:
        import psycopg

        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric, note text)")
            conn.execute(
                "CREATE TABLE items (order_id bigint, line int, sku text, price numeric, "
                "PRIMARY KEY (order_id, line))"
            )
        slots = [f"raw_{i}" for i in range(args.pairs)] + [f"run_{i}" for i in range(args.pairs)]
        make_slots(cluster.dsn(), slots)
        written = write_workload(cluster.dsn(), args.transactions, args.rows_per_transaction)

        spark = spark_ckpt.local_session("bench-postgres-cdc")
        control = spark_ckpt.install(spark)
        spark.sparkContext.setLogLevel("ERROR")
        raws, runs, ratios, startups = [], [], [], []
        for pair in range(args.pairs):
            raw, raw_changes = raw_rate(cluster.dsn(), f"raw_{pair}")
            workdir = root / f"run-{pair}"
            rate, startup, changes = connector_rate(
                spark,
                control,
                cluster.dsn(),
                f"run_{pair}",
                workdir,
                args.max_changes_per_trigger,
            )
            if not raw_changes == changes == written:
                raise SystemExit(f"counts differ: {written} written, {raw_changes}, {changes} read")
            raws.append(raw)
            runs.append(rate)
            ratios.append(rate / raw)
            startups.append(startup)
            shutil.rmtree(workdir, ignore_errors=True)
        spark.stop()
    finally:
        cluster.stop()
        shutil.rmtree(cluster.workdir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    print(
        json.dumps(
            {
                "bench": "postgres_cdc",
                "changes": written,
                "transactions": args.transactions,
                "max_changes_per_trigger": args.max_changes_per_trigger,
                "pairs": args.pairs,
                "connector_changes_per_s": round(statistics.median(runs)),
                "raw_decoding_changes_per_s": round(statistics.median(raws)),
                "ratio_connector_over_raw": round(statistics.median(ratios), 4),
                "query_startup_s": round(statistics.median(startups), 2),
                "target_ratio": 0.8,
            }
        )
    )


if __name__ == "__main__":
    main()
