"""The postgres connector against Debezium's own PostgreSQL connector, side by side.

One throwaway PostgreSQL server, the same workload, identical slots (``pgoutput``, one
publication), alternating pairs:

- *ours*: ``txn-cdc`` (``connector=postgres``, ``plugin=pgoutput``) into ``delta-2pc`` with
  ``Trigger.availableNow``: every change lands in a Delta table, exactly once, whole
  transactions per version;
- *Debezium*: its embedded engine with its PostgreSQL connector (``bench/peers/debezium``, a
  small Maven project built on first use), consuming into a handler that only counts: the peer's
  best case, with no Kafka, no serialization to a topic and no sink.

Two phases, each its own ratio (Debezium's time over ours; above 1: ours is faster):

- *stream*: ``--transactions`` committed transactions (inserts and an update each) read from a
  slot created before them (ours ``snapshot=never``; Debezium ``snapshot.mode=no_data``);
- *snapshot*: the initial snapshot of a table of ``--snapshot-rows`` rows, each side creating
  its own slot: ours ``snapshot=initial`` (the default: one transaction-consistent read, like
  Debezium's ``snapshot.mode=initial``), or ``--snapshot-mode incremental`` (chunks read in
  parallel, resumable).

Our side runs once unmeasured first (the JVM's warm-up); each peer run is a JVM of its own, as
a Debezium Server or Kafka Connect worker restart would be. Each side's time is its whole run,
from its start (our query's start; the peer's JVM launch) to its last change, so both include
their startup; ``*_startup_s`` says how much. The verdicts are the medians of the per-pair
ratios. Prints one JSON line with ``ratio_over_debezium_stream``
and ``ratio_over_debezium_snapshot``. Run: ``scripts/bench.sh postgres_vs_debezium``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from debezium_peer import peer_jar, run_peer
from postgres_cdc import TABLES, connector_run, create_tables, write_workload

from harness.servers.postgres import PASSWORD, USER, PgCluster

SNAPSHOT_TABLE = "public.accounts"


def run_peer_pg(
    cluster: PgCluster,
    jar: Path,
    *,
    slot: str,
    publication: str,
    tables: str,
    snapshot_mode: str,
    expect: int,
    workdir: Path,
) -> tuple[float, dict[str, Any]]:
    """One run of the Debezium peer; (seconds from JVM launch to exit, its JSON line)."""
    settings = {
        "host": "127.0.0.1",
        "port": str(cluster.port),
        "user": USER,
        "password": PASSWORD,
        "database": "postgres",
        "slot": slot,
        "publication": publication,
        "tables": tables,
        "snapshot-mode": snapshot_mode,
        "timeout-s": "1800",
        "offsets-file": str(workdir / "offsets.dat"),
    }
    return run_peer(jar, settings, expect)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=40_000)
    parser.add_argument("--rows-per-transaction", type=int, default=6)
    parser.add_argument("--snapshot-rows", type=int, default=3_000_000)
    parser.add_argument("--snapshot-mode", choices=("initial", "incremental"), default="initial")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()

    import psycopg

    import spark_ckpt

    jar = peer_jar()
    root = Path(tempfile.mkdtemp(prefix="spark-ckpt-bench-vs-dbz-"))
    cluster = PgCluster(tempfile.mkdtemp(prefix="spark-ckpt-bench-vs-dbz-pg-")).start()
    try:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            create_tables(conn)
            conn.execute(
                "CREATE TABLE accounts (id bigint PRIMARY KEY, balance numeric, owner text, "
                "opened date)"
            )
            conn.execute(
                "INSERT INTO accounts SELECT g, g * 1.25, 'owner ' || g, "
                "date '2020-01-01' + (g %% 1000) FROM generate_series(1, %s) g",
                (args.snapshot_rows,),
            )
            conn.execute("VACUUM ANALYZE accounts")
            conn.execute("CREATE PUBLICATION bench_stream FOR TABLE orders, items")
            conn.execute("CREATE PUBLICATION bench_snapshot FOR TABLE accounts")
            slots = ["warmup"] + [
                f"stream_{side}_{pair}" for pair in range(args.pairs) for side in ("ours", "dbz")
            ]
            for slot in slots:
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        written = write_workload(dsn, args.transactions, args.rows_per_transaction)

        spark = spark_ckpt.local_session("bench-postgres-vs-debezium")
        control = spark_ckpt.install(spark)
        spark.sparkContext.setLogLevel("ERROR")
        warmup = root / "warmup"
        warmup.mkdir()
        connector_run(
            spark, control, dsn, "warmup", warmup, plugin="pgoutput", publication="bench_stream"
        )
        ratios: dict[str, list[float]] = {"stream": [], "snapshot": []}
        seconds: dict[str, list[float]] = {}
        for pair in range(args.pairs):
            for phase in ("stream", "snapshot"):
                ours_first = (pair + (phase == "snapshot")) % 2 == 0
                timed: dict[str, float] = {}
                for side in ("ours", "dbz") if ours_first else ("dbz", "ours"):
                    workdir = root / f"{phase}-{side}-{pair}"
                    workdir.mkdir()
                    stream = phase == "stream"
                    slot = f"{phase}_{side}_{pair}"
                    expect = written if stream else args.snapshot_rows
                    if side == "ours":
                        run = connector_run(
                            spark,
                            control,
                            dsn,
                            slot,
                            workdir,
                            plugin="pgoutput",
                            publication=f"bench_{phase}",
                            tables=",".join(TABLES) if stream else SNAPSHOT_TABLE,
                            snapshot="never" if stream else args.snapshot_mode,
                        )
                        if run.rows != expect:
                            raise SystemExit(f"ours read {run.rows} changes, not {expect}")
                        timed[side] = run.wall
                        seconds.setdefault(f"{phase}_ours_startup_s", []).append(run.startup)
                    else:
                        wall, figures = run_peer_pg(
                            cluster,
                            jar,
                            slot=slot,
                            publication=f"bench_{phase}",
                            tables=",".join(TABLES) if stream else SNAPSHOT_TABLE,
                            snapshot_mode="no_data" if stream else "initial",
                            expect=expect,
                            workdir=workdir,
                        )
                        timed[side] = wall
                        seconds.setdefault(f"{phase}_dbz_startup_s", []).append(
                            wall - (figures["seconds_to_expected"] - figures["seconds_to_first"])
                        )
                    seconds.setdefault(f"{phase}_{side}_s", []).append(timed[side])
                    shutil.rmtree(workdir, ignore_errors=True)
                ratios[phase].append(timed["dbz"] / timed["ours"])
                print(json.dumps({"pair": pair, "phase": phase, **timed}), file=sys.stderr)
        spark.stop()
    finally:
        cluster.stop()
        shutil.rmtree(cluster.workdir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    print(
        json.dumps(
            {
                "bench": "postgres_vs_debezium",
                "stream_changes": written,
                "transactions": args.transactions,
                "snapshot_rows": args.snapshot_rows,
                "snapshot_mode": args.snapshot_mode,
                "pairs": args.pairs,
                "ratio_over_debezium_stream": round(statistics.median(ratios["stream"]), 3),
                "ratio_over_debezium_snapshot": round(statistics.median(ratios["snapshot"]), 3),
                "median_seconds": {
                    k: round(statistics.median(v), 2) for k, v in sorted(seconds.items())
                },
            }
        )
    )


if __name__ == "__main__":
    main()
