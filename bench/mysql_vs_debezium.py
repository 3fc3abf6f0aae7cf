"""The mysql connector against Debezium's own MariaDB connector, side by side, into Delta or not.

One throwaway MariaDB server (Debian's, as the tests use), the same binlog, alternating pairs:

- *ours*: ``txn-cdc`` (``connector=mysql``) into ``delta-2pc`` with ``Trigger.availableNow``:
  every change lands in a Delta table, exactly once, whole transactions per version;
- *Debezium*: its embedded engine with its MariaDB connector (``bench/peers/debezium``, the
  ``-Pmariadb`` build on Debezium 3.5.0.Final), consuming into a handler that only counts: the
  peer's best case, with no Kafka, no serialization to a topic and no sink.

Two phases, each its own ratio (Debezium's time over ours; above 1: ours is faster):

- *stream*: ``--transactions`` committed transactions (an order, its items, an update of an
  earlier order) read from the binlog by a reader whose position was recorded before they were
  written. Neither side can be told to start at a binlog position, so each first runs until it
  has delivered a marker transaction (ours ``snapshot=never``: a checkpointed batch; Debezium
  ``snapshot.mode=no_data``: its offsets file), and the timed run resumes from there;
- *snapshot*: the initial snapshot of a table of ``--snapshot-rows`` rows (ours
  ``snapshot=initial``, one consistent read like Debezium's ``snapshot.mode=initial``, or
  ``--snapshot-mode incremental``: key-range chunks read in parallel, resumable).

Our side runs once unmeasured first (the JVM's warm-up); each peer run is a JVM of its own, as a
Debezium Server or Kafka Connect worker restart would be. Each side's time is its whole run, from
its start (our query's start; the peer's JVM launch) to its last change, so both include their
startup. The verdicts are the medians of the per-pair ratios. Prints one JSON line with
``ratio_over_debezium_stream`` and ``ratio_over_debezium_snapshot``.
Run: ``scripts/bench.sh mysql_vs_debezium``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from debezium_peer import peer_command, peer_jar, run_peer
from passthrough import Timed, busy_cpu_seconds

from harness.servers.mariadb import MariaDbServer

DATABASE = "bench"
STREAM_TABLES = (f"{DATABASE}.orders", f"{DATABASE}.items")
SNAPSHOT_TABLE = f"{DATABASE}.accounts"
MARKER_TIMEOUT_S = 120.0


def create_tables(server: MariaDbServer, snapshot_rows: int) -> None:
    """The stream's tables, and the snapshot's table with ``snapshot_rows`` rows (once)."""
    server.create_database(DATABASE)
    server.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer varchar(32), total decimal(12,2))",
        DATABASE,
    )
    server.execute(
        "CREATE TABLE items (id bigint PRIMARY KEY, order_id bigint, qty int)",
        DATABASE,
    )
    server.execute(
        "CREATE TABLE accounts (id bigint PRIMARY KEY, balance decimal(14,2), owner varchar(40),"
        " opened date)",
        DATABASE,
    )
    # MariaDB's Sequence engine: seq_1_to_N is a table of the numbers 1 to N.
    server.execute(
        f"INSERT INTO accounts SELECT seq, seq * 1.25, CONCAT('owner ', seq), "
        f"DATE '2020-01-01' + INTERVAL (seq % 1000) DAY FROM seq_1_to_{snapshot_rows}",
        DATABASE,
    )


class Workload:
    """Writes the stream's transactions and markers; knows how many changes it committed."""

    def __init__(self, server: MariaDbServer) -> None:
        self.conn = server.connect(DATABASE)
        self.next_id = 1
        self.random = random.Random(11)
        self.marker_changes = 0

    def transactions(self, count: int, rows_per_transaction: int) -> int:
        """``count`` transactions of ``rows_per_transaction`` changes each; the changes."""
        changes = 0
        with self.conn.cursor() as cursor:
            for _ in range(count):
                self.conn.begin()
                order = self.next_id
                self.next_id += 1
                cursor.execute(
                    "INSERT INTO orders VALUES (%s, %s, %s)",
                    (order, f"c{order % 97}", self.random.randrange(100, 99_999) / 100),
                )
                items = max(0, rows_per_transaction - 2)
                cursor.executemany(
                    "INSERT INTO items VALUES (%s, %s, %s)",
                    [(order * 100 + i, order, i + 1) for i in range(items)],
                )
                cursor.execute("UPDATE orders SET total = total + 1 WHERE id = %s", (order,))
                self.conn.commit()
                changes += 2 + items
        return changes

    def marker(self) -> None:
        """One small transaction (an order and its update), for a reader to record its position."""
        self.marker_changes += self.transactions(1, 1)

    def close(self) -> None:
        """Close the workload's connection."""
        self.conn.close()


def our_options(server: MariaDbServer, tables: str, snapshot: str) -> dict[str, str]:
    """The ``txn-cdc`` options of our side."""
    return {
        "connector": "mysql",
        "host": server.host,
        "port": str(server.port),
        "user": server.user,
        "password": server.password,
        "serverId": "7301",
        "tables": tables,
        "snapshot": snapshot,
    }


def start_query(spark: Any, options: dict[str, str], workdir: Path, **trigger: Any) -> Any:
    """Our query into ``delta-2pc`` under ``workdir`` (table and checkpoint), started."""
    return (
        spark.readStream.format("txn-cdc")
        .options(**options)
        .load()
        .writeStream.format("delta-2pc")
        .option("path", str(workdir / "table"))
        .option("checkpointLocation", str(workdir / "ckpt"))
        .trigger(**trigger)
        .start()
    )


def our_run(spark: Any, control: Any, options: dict[str, str], workdir: Path) -> Timed:
    """One ``availableNow`` run into ``delta-2pc`` under ``workdir`` (its checkpoint kept)."""
    cpu, began = busy_cpu_seconds(), time.perf_counter()
    query = start_query(spark, options, workdir, availableNow=True)
    return Timed(control, query, began, cpu)


def our_position(spark: Any, options: dict[str, str], workdir: Path, workload: Workload) -> None:
    """Record our reader's binlog position: a query runs until it delivered a marker."""
    query = start_query(spark, options, workdir, processingTime="200 milliseconds")
    deadline = time.monotonic() + MARKER_TIMEOUT_S
    try:
        while not any(p["numInputRows"] for p in query.recentProgress):
            if time.monotonic() > deadline:
                raise SystemExit(f"our query delivered no marker in {MARKER_TIMEOUT_S:.0f} s")
            if query.exception() is not None:
                raise SystemExit(f"our query failed: {query.exception()}")
            workload.marker()
            time.sleep(1.0)
    finally:
        query.stop()


def peer_position(jar: Path, settings: dict[str, str], workload: Workload) -> None:
    """Record the peer's binlog position: it runs until it counted a marker (its offsets file)."""
    # Its output goes to a file: a pipe nobody reads while it runs could fill and stall it.
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen(
            peer_command(jar, {**settings, "expect": "1"}),
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
        deadline = time.monotonic() + MARKER_TIMEOUT_S
        while process.poll() is None:
            if time.monotonic() > deadline:
                process.kill()
                raise SystemExit(f"the Debezium peer counted no marker in {MARKER_TIMEOUT_S:.0f} s")
            workload.marker()
            time.sleep(1.0)
        log.seek(0)
        stderr = log.read()
    if process.returncode != 0:
        raise SystemExit(f"the Debezium peer failed ({process.returncode}): {stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=20_000)
    parser.add_argument("--rows-per-transaction", type=int, default=6)
    parser.add_argument("--snapshot-rows", type=int, default=1_000_000)
    parser.add_argument("--snapshot-mode", choices=("initial", "incremental"), default="initial")
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()

    import spark_ckpt

    jar = peer_jar("mariadb")
    root = Path(tempfile.mkdtemp(prefix="spark-ckpt-bench-mysql-"))
    server = MariaDbServer(tempfile.mkdtemp(prefix="bench-mdb-")).start()
    try:
        create_tables(server, args.snapshot_rows)
        workload = Workload(server)
        spark = spark_ckpt.local_session("bench-mysql-vs-debezium")
        control = spark_ckpt.install(spark)
        spark.sparkContext.setLogLevel("ERROR")
        warmup = root / "warmup"
        our_run(spark, control, our_options(server, ",".join(STREAM_TABLES), "initial"), warmup)
        peer_settings = {
            "connector": "mariadb",
            "host": server.host,
            "port": str(server.port),
            "user": server.user,
            "password": server.password,
            "database": DATABASE,
            "timeout-s": "1800",
        }
        ratios: dict[str, list[float]] = {"stream": [], "snapshot": []}
        seconds: dict[str, list[float]] = {}
        written = 0
        for pair in range(args.pairs):
            # stream: both record their position, then the transactions are written, then each
            # reads them (and the other's markers after its own) in a timed run.
            ours_dir, peer_dir = root / f"stream-ours-{pair}", root / f"stream-dbz-{pair}"
            peer_dir.mkdir(parents=True)
            stream = our_options(server, ",".join(STREAM_TABLES), "never")
            stream_peer = {
                **peer_settings,
                "tables": ",".join(STREAM_TABLES),
                "snapshot-mode": "no_data",
                "offsets-file": str(peer_dir / "offsets.dat"),
            }
            our_position(spark, stream, ours_dir, workload)
            markers_before = workload.marker_changes
            peer_position(jar, stream_peer, workload)
            markers_after = workload.marker_changes - markers_before
            written = workload.transactions(args.transactions, args.rows_per_transaction)
            timed: dict[str, float] = {}
            for side in ("ours", "dbz") if pair % 2 == 0 else ("dbz", "ours"):
                if side == "ours":
                    run = our_run(spark, control, stream, ours_dir)
                    # The transactions, and the markers its position's last batch did not take
                    # (the peer's, and any of its own written while its query stopped). The
                    # tests check exactness; this checks nothing is missing or read twice over.
                    if not written + markers_after <= run.rows <= written + markers_after + 4:
                        raise SystemExit(
                            f"ours read {run.rows} changes, not {written} transactions' changes "
                            f"and {markers_after} to {markers_after + 4} of the markers'"
                        )
                    timed[side] = run.wall
                else:
                    # Markers written after the one it counted come first: it may stop that
                    # many records short of the last transaction, a few out of the many.
                    timed[side], _ = run_peer(jar, stream_peer, written, exact=False)
                seconds.setdefault(f"stream_{side}_s", []).append(timed[side])
            ratios["stream"].append(timed["dbz"] / timed["ours"])
            print(json.dumps({"pair": pair, "phase": "stream", **timed}), file=sys.stderr)

            timed = {}
            for side in ("dbz", "ours") if pair % 2 == 0 else ("ours", "dbz"):
                workdir = root / f"snapshot-{side}-{pair}"
                workdir.mkdir(parents=True)
                if side == "ours":
                    options = our_options(server, SNAPSHOT_TABLE, args.snapshot_mode)
                    options["snapshotDir"] = str(workdir / "spill")
                    run = our_run(spark, control, options, workdir)
                    if run.rows != args.snapshot_rows:
                        raise SystemExit(f"ours read {run.rows} rows, not {args.snapshot_rows}")
                    timed[side] = run.wall
                else:
                    settings = {
                        **peer_settings,
                        "tables": SNAPSHOT_TABLE,
                        "snapshot-mode": "initial",
                        "offsets-file": str(workdir / "offsets.dat"),
                    }
                    timed[side], _ = run_peer(jar, settings, args.snapshot_rows)
                seconds.setdefault(f"snapshot_{side}_s", []).append(timed[side])
                shutil.rmtree(workdir, ignore_errors=True)
            ratios["snapshot"].append(timed["dbz"] / timed["ours"])
            print(json.dumps({"pair": pair, "phase": "snapshot", **timed}), file=sys.stderr)
            shutil.rmtree(ours_dir, ignore_errors=True)
            shutil.rmtree(peer_dir, ignore_errors=True)
        workload.close()
        spark.stop()
    finally:
        server.stop()
        shutil.rmtree(server.workdir, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    print(
        json.dumps(
            {
                "bench": "mysql_vs_debezium",
                "server": "MariaDB (Debian's)",
                "peer": "Debezium 3.5.0.Final MariaDB connector, embedded, counting",
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
