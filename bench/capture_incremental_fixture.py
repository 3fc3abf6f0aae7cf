"""Capture what Debezium writes for an incremental snapshot, as a small test fixture.

Debezium's PostgreSQL connector (the writer of ``tests/harness/peers/debezium-writer``) captures a
fresh database with ``snapshot.mode=no_data`` and a signal table; an ``execute-snapshot`` signal
then snapshots ``public.orders`` incrementally in chunks of 3 rows while transactions change the
table. The JSONL files and a ``STEPS.txt`` of what was done go to ``--out`` (by default
``tests/fixtures/debezium/incremental-postgres-3.6.1``, the unit tests' fixture).

Run: ``python bench/capture_incremental_fixture.py`` (needs PostgreSQL and the writer's jars, as
the test setup installs them).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import psycopg

from harness.servers.postgres import PASSWORD, USER, PgCluster
from harness.workloads.debezium import DebeziumWriter

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "debezium" / "incremental-postgres-3.6.1"
SIGNAL = (
    "INSERT INTO debezium_signal VALUES ('sig-1', 'execute-snapshot', "
    """'{"data-collections": ["public.orders"], "type": "incremental"}')"""
)


def capture(out: Path) -> None:
    """Run the steps above and copy the log Debezium wrote to ``out``."""
    work = Path(tempfile.mkdtemp(prefix="dbz-incremental-"))
    steps: list[str] = []

    def step(text: str) -> None:
        steps.append(f"{time.strftime('%H:%M:%S')} {text}")
        print(steps[-1], flush=True)

    # Not under ``work``: the server runs as the postgres user, and mkdtemp's folders are private.
    with PgCluster(tempfile.mkdtemp(prefix="dbz-incremental-pg-")) as server:
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE orders (id int PRIMARY KEY, total numeric(10,2))")
            conn.execute(
                "CREATE TABLE debezium_signal "
                "(id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))"
            )
            conn.execute("INSERT INTO orders SELECT n, n * 10 FROM generate_series(1, 8) AS n")
        step("orders 1..8 (total = 10 * id); snapshot.mode=no_data: no initial snapshot")
        writer = DebeziumWriter(
            "postgres",
            work / "log",
            work / "writer",
            host="127.0.0.1",
            port=server.port,
            user=USER,
            password=PASSWORD,
            database="postgres",
            tables="public.orders,public.debezium_signal",
            snapshot_mode="no_data",
            roll_records=7,
            props={
                "decimal.handling.mode": "string",
                "signal.data.collection": "public.debezium_signal",
                "incremental.snapshot.chunk.size": "3",
            },
        )
        with writer:
            step("writer started")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE orders SET total = total + 1 WHERE id = 2")
                step("T1 update orders 2 total+1")
                conn.execute(SIGNAL)
                step("signal: execute-snapshot public.orders, incremental, chunks of 3 rows")
                conn.execute("UPDATE orders SET total = total + 1 WHERE id = 5")
                step("T2 update orders 5 total+1 (while the snapshot runs)")
                conn.execute("DELETE FROM orders WHERE id = 7")
                step("T3 delete orders 7")
                conn.execute("INSERT INTO orders VALUES (9, 90)")
                step("T4 insert orders 9")
            published = writer.wait_idle(3.0, 120)
            step(f"idle: {published} records published")
        step("writer stopped")
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.jsonl"):
            old.unlink()
        for f in writer.files():
            shutil.copyfile(f, out / f.name)
    (out / "STEPS.txt").write_text("\n".join(steps) + "\n")
    shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    capture(parser.parse_args(argv).out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
