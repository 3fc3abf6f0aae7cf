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

Each pair also runs a *pass-through*: the rows the connector just wrote, read back from its
Delta table, replayed in the same batches by a Python streaming source that decodes nothing, into
``delta-2pc``: what Spark's Python data source path and the sink cost on their own (and, for
comparison, the same replay into delta-spark's own ``format("delta")`` sink). With the
machine's busy CPU seconds (``/proc/stat``) of each run, two ceilings on the ratio follow from
measurements alone, for any decoding however fast:

- ``ceiling_serial``: raw / (raw + pass-through) time. Spark's micro-batch loop plans a batch
  (``latestOffset``: the peek) and only then runs it, so a connector that peeks the slot pays
  the peek and the batch one after the other;
- ``ceiling_cpu``: raw time x cores / (raw + pass-through CPU seconds): even with the peek
  overlapped with the batches, both need the same cores.

The same numbers say what reaching the target would take. ``budget_cpu_us_per_change`` is the
CPU a connector at ``TARGET_RATIO`` could spend per change on its own work (cores x raw time /
target, less the raw peek's and the pass-through's CPU), assuming a peek perfectly overlapped
with the batches; negative means no decoder, however fast, gets there. Beside it, what that work
costs now: ``grouping_cpu_us_per_change`` (the driver grouping peeked rows into transactions) and
``decoding_cpu_us_per_change`` (the executors' decoding), both timed in the bench's process on the
raw peek's rows.

Prints one JSON line; the verdict is the median of the per-pair ratios connector/raw, and of
connector/raw over ``ceiling_cpu`` (``connector_over_ceiling_cpu``, the issue's target 0.8).
``ceiling_serial_over_ceiling_cpu`` is where a connector costing nothing would land on that
scale with its peeks not overlapped with batches. ``--warmup`` pairs run first, uncounted.
Run: ``scripts/bench.sh postgres_cdc`` (or ``python bench/postgres_cdc.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from passthrough import Timed, busy_cpu_seconds, passthrough_run

from harness.servers.postgres import PgCluster

TABLES = ("public.orders", "public.items")
TARGET_RATIO = 0.8  # the target: connector rate / raw decoding rate


def make_slots(dsn: str, names: list[str]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'wal2json')", (name,))


def create_tables(conn: Any) -> None:
    """Create the tables :func:`write_workload` writes to (:data:`TABLES`)."""
    conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, amount numeric, note text)")
    conn.execute(
        "CREATE TABLE items (order_id bigint, line int, sku text, price numeric, "
        "PRIMARY KEY (order_id, line))"
    )


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


def raw_rate(dsn: str, slot: str) -> tuple[float, int, float, float, list[tuple[str, int, str]]]:
    """(changes/s, changes, seconds, busy CPU seconds, the rows) of one full peek of ``slot``."""
    import psycopg

    from spark_ckpt.sources.postgres.decoding.wal2json import PLUGIN_OPTIONS

    options = [*PLUGIN_OPTIONS, "add-tables", ",".join(TABLES)]
    placeholders = ", ".join(["%s"] * len(options))
    with psycopg.connect(dsn, autocommit=True) as conn:
        cpu = busy_cpu_seconds()
        began = time.perf_counter()
        rows = conn.execute(
            f"SELECT lsn::text, xid::text::bigint, data FROM pg_logical_slot_peek_changes("
            f"%s, NULL, NULL, {placeholders})",
            (slot, *options),
        ).fetchall()
        elapsed = time.perf_counter() - began
        cpu = busy_cpu_seconds() - cpu
    changes = sum(1 for _, _, data in rows if data.startswith(('{"action":"I"', '{"action":"U"')))
    return changes / elapsed, changes, elapsed, cpu, rows


def work_per_change(rows: list[tuple[str, int, str]]) -> tuple[float, float]:
    """CPU µs per change of the connector's own work on ``rows``: (grouping, decoding).

    Grouping into transactions is what the driver adds to the peek; decoding is what the
    executors do. Measured here in one process (``time.process_time``), the median of 3.
    """
    import pyarrow as pa

    from spark_ckpt.sources.postgres.decoding.wal2json import decode_transactions
    from spark_ckpt.sources.postgres.decoding.wal2json_columns import decode_changes

    def cpu(work: Any) -> float:
        runs = []
        for _ in range(3):
            began = time.process_time()
            work()
            runs.append(time.process_time() - began)
        return statistics.median(runs)

    texts = [data for _, _, data in rows if data[11:12] in ("I", "U", "D")]
    grouping = cpu(lambda: list(decode_transactions(rows)))
    array = pa.array(texts, pa.string())
    decoding = cpu(lambda: decode_changes(array))
    return grouping / len(texts) * 1e6, decoding / len(texts) * 1e6


def connector_run(
    spark: Any, control: Any, dsn: str, slot: str, workdir: Path, **options: str
) -> Timed:
    """One availableNow run of the connector into delta-2pc.

    ``options`` add to or override the defaults (this bench's tables, ``snapshot=never``).
    """
    cpu, began = busy_cpu_seconds(), time.perf_counter()
    reader = spark.readStream.format("txn-cdc")
    settings = {
        "connector": "postgres",
        "dsn": dsn,
        "slot": slot,
        "tables": ",".join(TABLES),
        "snapshot": "never",
        **options,
    }
    for name, value in settings.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .writeStream.format("delta-2pc")
        .option("path", str(workdir / "table"))
        .option("checkpointLocation", str(workdir / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    return Timed(control, query, began, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=20_000)
    parser.add_argument("--rows-per-transaction", type=int, default=6)
    parser.add_argument("--max-changes-per-trigger", type=int, default=50_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="pairs run first and not counted: the session's first queries run on cold JVM code "
        "and fresh Python workers, which the connector and pass-through pay and raw does not",
    )
    parser.add_argument(
        "--details", action="store_true", help="also print each batch's durationMs to stderr"
    )
    args = parser.parse_args()

    import spark_ckpt

    root = Path(tempfile.mkdtemp(prefix="spark-ckpt-bench-pg-"))
    # A directory of its own: the server may run as the postgres user, root's temp dirs are private.
    cluster = PgCluster(tempfile.mkdtemp(prefix="spark-ckpt-bench-pgdata-")).start()
    try:
        import psycopg

        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            create_tables(conn)
        runs_total = args.warmup + args.pairs
        slots = [f"raw_{i}" for i in range(runs_total)] + [f"run_{i}" for i in range(runs_total)]
        make_slots(cluster.dsn(), slots)
        written = write_workload(cluster.dsn(), args.transactions, args.rows_per_transaction)

        spark = spark_ckpt.local_session("bench-postgres-cdc")
        control = spark_ckpt.install(spark)
        spark.sparkContext.setLogLevel("ERROR")
        raws, runs, ratios, startups, serial, cpu_bound, sinks = [], [], [], [], [], [], []
        budgets, groupings, decodings, of_ceiling, serial_of_cpu = [], [], [], [], []
        cores = os.cpu_count() or 1
        for pair in range(runs_total):
            raw, raw_changes, raw_seconds, raw_cpu, raw_rows = raw_rate(
                cluster.dsn(), f"raw_{pair}"
            )
            grouping, decoding = work_per_change(raw_rows)
            del raw_rows
            workdir = root / f"run-{pair}"
            run = connector_run(
                spark,
                control,
                cluster.dsn(),
                f"run_{pair}",
                workdir,
                maxChangesPerTrigger=str(args.max_changes_per_trigger),
            )
            if not raw_changes == run.rows == written:
                raise SystemExit(f"counts differ: {written} written, {raw_changes}/{run.rows} read")
            replay, native = (
                passthrough_run(spark, control, workdir / "table", workdir, run.batches, sink)
                for sink in ("delta-2pc", "delta")
            )
            if not replay.rows == native.rows == written:
                raise SystemExit(f"the pass-through replayed {replay.rows}/{native.rows} rows")
            if pair < args.warmup:
                shutil.rmtree(workdir, ignore_errors=True)
                continue
            raws.append(raw)
            runs.append(run.rows / run.seconds)
            ratios.append(raw_seconds / run.seconds)
            startups.append(run.startup)
            serial.append(raw_seconds / (raw_seconds + replay.seconds))
            cpu_bound.append(raw_seconds * cores / (raw_cpu + replay.cpu))
            of_ceiling.append(ratios[-1] / cpu_bound[-1])
            serial_of_cpu.append(serial[-1] / cpu_bound[-1])
            sinks.append(native.seconds / replay.seconds)
            # CPU seconds a connector at the target ratio may use, less what PostgreSQL's decoding
            # and the pass-through already take: what is left for the connector's own work.
            budget = cores * raw_seconds / TARGET_RATIO - raw_cpu - replay.cpu
            budgets.append(budget / written * 1e6)
            groupings.append(grouping)
            decodings.append(decoding)
            print(
                json.dumps(
                    {
                        "pair": pair,
                        "raw_s": round(raw_seconds, 3),
                        "raw_cpu_s": round(raw_cpu, 3),
                        "connector_s": run.seconds,
                        "connector_cpu_s": round(run.cpu, 3),
                        "connector_batches": run.batches,
                        "passthrough_s": replay.seconds,
                        "passthrough_cpu_s": round(replay.cpu, 3),
                        "passthrough_delta_s": native.seconds,
                        "budget_us_per_change": round(budgets[-1], 2),
                        "grouping_us_per_change": round(grouping, 2),
                        "decoding_us_per_change": round(decoding, 2),
                    }
                ),
                file=sys.stderr,
            )
            if args.details:
                for name, timed in (("connector", run), ("passthrough", replay), ("delta", native)):
                    for durations in timed.durations:
                        print(f"  {name} durationMs {durations}", file=sys.stderr)
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
                "warmup_pairs": args.warmup,
                "connector_changes_per_s": round(statistics.median(runs)),
                "raw_decoding_changes_per_s": round(statistics.median(raws)),
                "ratio_connector_over_raw": round(statistics.median(ratios), 4),
                "query_startup_s": round(statistics.median(startups), 2),
                "ceiling_serial": round(statistics.median(serial), 4),
                "ceiling_cpu": round(statistics.median(cpu_bound), 4),
                "connector_over_ceiling_cpu": round(statistics.median(of_ceiling), 3),
                "ceiling_serial_over_ceiling_cpu": round(statistics.median(serial_of_cpu), 3),
                "passthrough_delta_over_2pc_time": round(statistics.median(sinks), 3),
                "budget_cpu_us_per_change": round(statistics.median(budgets), 2),
                "grouping_cpu_us_per_change": round(statistics.median(groupings), 2),
                "decoding_cpu_us_per_change": round(statistics.median(decodings), 2),
                "cores": cores,
                "target_ratio": TARGET_RATIO,
            }
        )
    )


if __name__ == "__main__":
    main()
