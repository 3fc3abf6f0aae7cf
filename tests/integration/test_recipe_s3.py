"""The docs' recipe end to end: PostgreSQL -> Debezium -> files on S3 -> txn-cdc -> mirrors.

Debezium's embedded engine (``tests/harness/peers/debezium-writer``, the same library Debezium
Server runs) captures two tables of a real PostgreSQL and publishes each file as one S3 object on
the moto server; the recipe's query (``examples/debezium-to-s3/mirror.py``, quoted in
``docs/deployment.md``) streams them into ``delta-2pc`` mirrors on the same store while a
multi-table workload runs and the writer is SIGKILLed and restarted; then every mirror, read with
``read_consistent``, equals its PostgreSQL table row for row.

Keep the section "Recipe: Debezium to S3 to Delta mirrors" of ``docs/deployment.md`` in sync with
what this test runs: its Python block is checked below to be quoted unchanged from the example file,
and its ``java`` command is the ``DebeziumWriter`` call in :func:`recipe_writer` (the same options;
the runner spells out the writer's defaults, and the test adds a small ``--roll-records`` for many
objects and its own slot and publication names).
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
import re
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import psycopg

import spark_ckpt
from harness.servers.postgres import PASSWORD, USER, PgCluster
from harness.servers.s3 import SECRET_KEY, S3Server
from harness.workloads.debezium import DebeziumWriter
from spark_ckpt.state.storage import Location, StorageOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "debezium-to-s3" / "mirror.py"
SECTION = "## Recipe: Debezium to S3 to Delta mirrors"
PAGE = ROOT / "docs" / "deployment.md"
TABLES = {"public.customers": "id", "public.orders": "id"}
KEY_COLUMNS = "public.customers:id;public.orders:id"
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


def recipe_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("debezium_to_s3_mirror", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def readme_recipe_code() -> str:
    text = PAGE.read_text(encoding="utf-8")
    assert SECTION in text, f"{PAGE} has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert blocks, "the recipe section has no python block"
    return str(blocks[0])


def create_schema(dsn: str, rng: random.Random) -> None:
    """Two tables and their first rows (Debezium's initial snapshot takes these)."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute(
            "CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL, "
            "balance numeric(12,2) NOT NULL, updated timestamptz)"
        )
        conn.execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id integer NOT NULL, "
            "amount numeric(10,2) NOT NULL, status text NOT NULL, note text)"
        )
        for cid in range(1, 9):
            conn.execute(
                "INSERT INTO customers VALUES (%s, %s, %s, %s)",
                (cid, f"customer {cid}", Decimal("100.00"), moment(rng)),
            )
        for oid in range(1, 13):
            conn.execute(
                "INSERT INTO orders VALUES (%s, %s, %s, 'new', NULL)",
                (oid, rng.randint(1, 8), amount(rng)),
            )


def moment(rng: random.Random) -> datetime:
    return EPOCH + timedelta(microseconds=rng.randrange(10**12))


def amount(rng: random.Random) -> Decimal:
    return Decimal(rng.randrange(100, 100_000)) / 100


def transactions(dsn: str, rng: random.Random, count: int) -> None:
    """``count`` transactions, most touching both tables: inserts, updates, deletes, key changes."""
    with psycopg.connect(dsn) as conn:
        for _ in range(count):
            with conn.transaction():
                customers = [r[0] for r in conn.execute("SELECT id FROM customers ORDER BY id")]
                orders = [r[0] for r in conn.execute("SELECT id FROM orders ORDER BY id")]
                kind = rng.choice(["order", "order", "ship", "cancel", "churn", "join", "rekey"])
                if kind == "order" or not orders:  # a new order debits its customer
                    cid = rng.choice(customers)
                    total = amount(rng)
                    conn.execute(
                        "INSERT INTO orders VALUES ((SELECT coalesce(max(id), 0) + 1 FROM orders), "
                        "%s, %s, 'new', %s)",
                        (cid, total, rng.choice([None, "gift", "express"])),
                    )
                    conn.execute(
                        "UPDATE customers SET balance = balance - %s, updated = %s WHERE id = %s",
                        (total, moment(rng), cid),
                    )
                elif kind == "ship":  # two orders shipped, a note cleared, the customer touched
                    for oid in rng.sample(orders, min(2, len(orders))):
                        conn.execute(
                            "UPDATE orders SET status = 'shipped', note = NULL WHERE id = %s",
                            (oid,),
                        )
                    conn.execute(
                        "UPDATE customers SET updated = %s WHERE id = %s",
                        (moment(rng), rng.choice(customers)),
                    )
                elif kind == "cancel":  # an order deleted, its amount credited back
                    oid = rng.choice(orders)
                    conn.execute(
                        "UPDATE customers SET balance = balance + o.amount "
                        "FROM orders o WHERE o.id = %s AND customers.id = o.customer_id",
                        (oid,),
                    )
                    conn.execute("DELETE FROM orders WHERE id = %s", (oid,))
                elif kind == "churn" and len(customers) > 3:  # a customer and all its orders
                    cid = rng.choice(customers)
                    conn.execute("DELETE FROM orders WHERE customer_id = %s", (cid,))
                    conn.execute("DELETE FROM customers WHERE id = %s", (cid,))
                elif kind == "rekey":  # a primary-key update: Debezium's d and c at one LSN
                    oid = rng.choice(orders)
                    conn.execute(
                        "UPDATE orders SET id = (SELECT max(id) + 1000 FROM orders) WHERE id = %s",
                        (oid,),
                    )
                else:  # a new customer
                    conn.execute(
                        "INSERT INTO customers VALUES ((SELECT max(id) + 1 FROM customers), "
                        "'newcomer', 0, NULL)"
                    )


def recipe_writer(
    server: PgCluster, dsn: str, s3_server: S3Server, bucket: str, state: Path
) -> DebeziumWriter:
    """The recipe's ``java -jar debezium-writer.jar ... --out s3://BUCKET/cdc/`` command."""
    tag = uuid.uuid4().hex[:8]
    return DebeziumWriter(
        "postgres",
        f"s3://{bucket}/cdc/",
        state,  # --offsets-file state/offsets.dat; the in-progress file is spooled beside it
        host="127.0.0.1",
        port=server.port,
        user=USER,
        password=PASSWORD,  # --password-env
        database=dsn.rsplit("/", 1)[1],
        tables=",".join(TABLES),
        slot=f"dbz_{tag}",
        publication=f"dbz_{tag}",
        roll_records=25,  # many small objects, several per transaction burst
        s3_path_style=True,  # moto, like MinIO
        # AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, AWS_ENDPOINT_URL; and never an
        # instance-metadata lookup from a test machine.
        env={**s3_server.environment(), "AWS_EC2_METADATA_DISABLED": "true"},
    )


def micros(value: datetime | None) -> int | None:
    """An instant as microseconds since the epoch (psycopg's aware datetimes)."""
    if value is None:
        return None
    return (value - EPOCH) // timedelta(microseconds=1)


def exact(value: Any) -> Any:
    """Decimals compared by digits and scale, not only by value."""
    return value.as_tuple() if isinstance(value, Decimal) else value


def source_rows(dsn: str, table: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        cursor = conn.execute(f"SELECT * FROM {table}")
        columns = [d.name for d in cursor.description or ()]
        return sorted(
            tuple(
                (c, micros(v) if c == "updated" else exact(v))
                for c, v in zip(columns, row, strict=True)
            )
            for row in cursor.fetchall()
        )


def mirror_rows(frame: Any) -> list[tuple[Any, ...]]:
    from pyspark.sql import functions as sf

    columns = frame.columns
    if "updated" in columns:  # an instant, whatever the session's or Python's time zone
        epoch = int(EPOCH.timestamp() * 1_000_000)
        frame = frame.withColumn("updated", sf.unix_micros("updated") - sf.lit(epoch))
    return sorted(tuple((c, exact(row[c])) for c in columns) for row in frame.collect())


def differences(spark: SparkSession, lake: str, dsn: str) -> list[str]:
    """What differs between each mirror (newest consistent checkpoint) and its table."""
    tables = spark_ckpt.read_consistent(spark, lake)
    found = []
    for table in TABLES:
        if table not in tables:
            found.append(f"{table}: no mirror yet")
            continue
        want, have = source_rows(dsn, table), mirror_rows(tables[table])
        if want != have:
            missing = [r for r in want if r not in have]
            extra = [r for r in have if r not in want]
            found.append(f"{table}: missing {missing[:3]}, extra {extra[:3]}")
    return found


def wait_caught_up(query: Any, spark: SparkSession, lake: str, dsn: str, timeout: float) -> None:
    """Wait (bounded) until the query processed every file, then for the tables to match.

    The newest consistent checkpoint's publish may trail its batch a little.
    """
    deadline = time.monotonic() + timeout
    drained = threading.Thread(target=query.processAllAvailable, daemon=True)
    drained.start()
    drained.join(timeout)
    if query.exception() is not None:
        raise AssertionError(f"the mirror query failed: {query.exception()}")
    assert not drained.is_alive(), f"the mirror query did not process the files in {timeout:.0f}s"
    found = ["nothing published yet"]
    while time.monotonic() < deadline:
        with contextlib.suppress(spark_ckpt.UsageError):  # no checkpoint published yet
            found = differences(spark, lake, dsn)
        if not found:
            return
        time.sleep(1.0)
    raise AssertionError(f"the mirrors did not catch up with PostgreSQL in {timeout:.0f}s: {found}")


def test_the_readme_quotes_the_recipe_it_runs(s3_server: S3Server) -> None:
    """The recipe's Python block is the example's code; its s3a settings reach the S3 server."""
    code = readme_recipe_code()
    assert code in EXAMPLE.read_text(encoding="utf-8"), (
        f"the recipe code in {PAGE} differs from {EXAMPLE}: keep them the same"
    )
    conf = recipe_module().s3a_conf(s3_server.environment())
    reference = s3_server.spark_conf()  # what the tests' session uses
    assert conf == {key: reference[key] for key in conf}
    assert {"spark.hadoop.fs.s3a.endpoint", "spark.hadoop.fs.s3a.path.style.access"} <= set(conf)


def test_debezium_to_s3_to_delta_mirrors_equal_the_source_tables(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_server: PgCluster,
    pg_dsn: str,
    s3_server: S3Server,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    """Snapshot, multi-table transactions, a writer SIGKILL: the mirrors equal PostgreSQL."""
    rng = random.Random(9)
    create_schema(pg_dsn, rng)
    writer = recipe_writer(pg_server, pg_dsn, s3_server, s3_bucket, tmp_path / "writer")
    lake = f"s3a://{s3_bucket}/lake"
    query = None
    try:
        writer.start(90)
        query = recipe_module().start_mirror(
            spark,
            f"s3a://{s3_bucket}/cdc",
            lake,
            f"s3a://{s3_bucket}/checkpoints/lake",
            KEY_COLUMNS,
            trigger="2 seconds",
        )
        transactions(pg_dsn, rng, 25)
        # SIGKILL right after a publish while transactions run: the offsets lag what is on S3,
        # so Debezium repeats (once its offsets are past the snapshot, else it would take the
        # snapshot again). The ones above are all published by now: the record waited for
        # comes from these; the rest commit while the writer is down (the slot keeps them).
        writer.wait_offsets_past_snapshot(120)
        published = writer.published_records()
        during_kill = threading.Thread(
            target=transactions, args=(pg_dsn, random.Random(10), 10), daemon=True
        )
        during_kill.start()
        writer.wait_for_records(published + 1, 60)
        writer.kill()
        before_kill = writer.published_names()
        during_kill.join(120)
        assert not during_kill.is_alive(), "10 transactions did not commit within 120s"
        writer.start(90)
        transactions(pg_dsn, rng, 25)
        writer.wait_idle(1.5, 60)
        wait_caught_up(query, spark, lake, pg_dsn, 90)
    finally:
        if query is not None:
            query.stop()
        writer.close()

    for table in TABLES:
        assert source_rows(pg_dsn, table), f"{table} ended empty: the workload proves little"

    # One object per published file, zero-padded names in write order, and the restart went on
    # after the highest key: 1..N without a gap, nothing replaced.
    storage = StorageOptions.of(s3_server.options())
    names = sorted(e.name for e in Location(f"s3a://{s3_bucket}/cdc", storage).list())
    assert names == [f"{n:010d}.jsonl" for n in range(1, len(names) + 1)], names
    # (A SIGKILL right after an upload returned can leave one file unannounced on stdout.)
    assert set(writer.published_names()) <= set(names)
    assert len(names) > len(before_kill) > 1
    # Nothing in the spool is left behind, and no secret reached the writer's log.
    assert not [p.name for p in (tmp_path / "writer").iterdir() if p.name.endswith(".inprogress")]
    log = writer.log_file.read_text(encoding="utf-8")
    assert SECRET_KEY not in log
    assert PASSWORD not in log
