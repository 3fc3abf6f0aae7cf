"""Mirror mode from a real PostgreSQL server: typed mirrors equal their tables, read consistently.

A workload thread runs multi-table transactions (orders and items kept so that an order's total
is the sum of its items' amounts) with inserts, updates, deletes, primary-key updates, a large
TOASTed text that later updates leave unchanged, numerics, timestamps with time zone, arrays,
bytea, NULLs, and a column added mid-stream. ``txn-cdc`` (``columnTypes=true``) streams them into
``delta-2pc`` ``mode=mirror`` while a reader checks the invariant on ``read_consistent``. At the
end every mirror equals its PostgreSQL table row for row, and its columns have the mapped types.
"""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
import schema_migrations
from conftest import pgoutput_then_wal2json_in_soak, wait_until
from deltalake.exceptions import TableNotFoundError

import spark_ckpt
from harness.delta_reads import read_delta
from spark_ckpt.testing.shop_workload import invariant_violations

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

ORDERS, ITEMS = "public.orders", "public.items"
BIG = "toasted:" + "".join(random.Random(5).choice("abcdefghij") for _ in range(9000))
"""Incompressible enough to be stored out of line (TOAST), so updates that leave it alone do
not carry it in the WAL."""
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _create(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, "
            "total numeric(12,2) NOT NULL, placed_at timestamptz, tags text[], "
            "rating double precision, note text)"
        )
        conn.execute(
            "CREATE TABLE items (id bigint PRIMARY KEY, order_id bigint NOT NULL, "
            "amount numeric(12,2) NOT NULL, sku varchar(20), blob bytea, big text)"
        )
        conn.execute("ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL")
        conn.execute("INSERT INTO orders VALUES (1, 'seed', 5.00, now(), '{a}', 1.5, NULL)")
        conn.execute("INSERT INTO items VALUES (1, 1, 5.00, 'seed', '\\x00ff'::bytea, %s)", (BIG,))


class PgShop(threading.Thread):
    """Runs ``count`` random shop transactions; adds a column halfway through.

    ``special_floats`` adds NaN and infinities to the ratings: pgoutput carries them, wal2json
    prints them as null.
    """

    def __init__(self, dsn: str, count: int, seed: int, special_floats: bool = False) -> None:
        super().__init__(name="pg-shop", daemon=True)
        self.dsn, self.count = dsn, count
        self.ratings: list[float | None] = [None, 0.1, 1e300, -2.5e-300]
        if special_floats:
            self.ratings += [float("nan"), float("inf"), float("-inf")]
        self.rng = random.Random(seed)
        self.error: BaseException | None = None
        self.next_order, self.next_item = 2, 2

    def run(self) -> None:
        try:
            with psycopg.connect(self.dsn) as conn:
                for number in range(self.count):
                    if number == self.count // 2:
                        with conn.transaction():
                            conn.execute("ALTER TABLE orders ADD COLUMN channel text")
                    with conn.transaction():
                        self._step(conn, with_channel=number > self.count // 2)
                    time.sleep(0.03)
        except BaseException as e:  # surfaced by the test
            self.error = e

    def _retotal(self, conn: psycopg.Connection[Any], order_id: int) -> None:
        conn.execute(
            "UPDATE orders SET total = (SELECT coalesce(sum(amount), 0) FROM items "
            "WHERE order_id = %s) WHERE id = %s",
            (order_id, order_id),
        )

    def _step(self, conn: psycopg.Connection[Any], with_channel: bool) -> None:
        rng = self.rng
        orders = [r[0] for r in conn.execute("SELECT id FROM orders").fetchall()]
        items = conn.execute("SELECT id, order_id FROM items").fetchall()
        kind = rng.random()
        if not orders or kind < 0.3:
            order_id = self.next_order
            self.next_order += 1
            conn.execute(
                "INSERT INTO orders (id, customer, total, placed_at, tags, rating, note) "
                "VALUES (%s, %s, 0, %s, %s, %s, %s)",
                (
                    order_id,
                    f"c{rng.randint(1, 30)}",
                    dt.datetime(2026, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30)))
                    + dt.timedelta(microseconds=rng.randint(0, 10**12)),
                    rng.choice([None, [], ["x"], ["a b", 'q"uote', None]]),
                    rng.choice(self.ratings),
                    rng.choice([None, "gift", "ünïcode ✓"]),
                ),
            )
            for _ in range(rng.randint(1, 3)):
                conn.execute(
                    "INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s)",
                    (
                        self.next_item,
                        order_id,
                        Decimal(rng.randint(1, 10**9)) / 100,
                        f"sku-{rng.randint(1, 99)}",
                        rng.choice([None, b"\x00\x01binary\xff"]),
                        rng.choice([None, BIG, "short"]),
                    ),
                )
                self.next_item += 1
            self._retotal(conn, order_id)
            if with_channel:
                conn.execute(
                    "UPDATE orders SET channel = %s WHERE id = %s",
                    (rng.choice(["web", "shop"]), order_id),
                )
        elif kind < 0.6 and items:
            item_id, order_id = rng.choice(items)
            # Only the amount changes: the TOASTed text stays out of the WAL record.
            conn.execute(
                "UPDATE items SET amount = %s WHERE id = %s",
                (Decimal(rng.randint(1, 10**9)) / 100, item_id),
            )
            self._retotal(conn, order_id)
        elif kind < 0.7 and items:
            item_id, order_id = rng.choice(items)
            conn.execute("DELETE FROM items WHERE id = %s", (item_id,))
            self._retotal(conn, order_id)
        elif kind < 0.85 and items:
            item_id, _ = rng.choice(items)
            conn.execute("UPDATE items SET id = %s WHERE id = %s", (self.next_item, item_id))
            self.next_item += 1
        else:
            order_id = rng.choice(orders)
            conn.execute("DELETE FROM items WHERE order_id = %s", (order_id,))
            conn.execute("DELETE FROM orders WHERE id = %s", (order_id,))


def _pg_rows(dsn: str, table: str) -> list[dict[str, Any]]:
    with psycopg.connect(dsn) as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return list(cur.execute(f"SELECT * FROM {table}").fetchall())


def _canonical(value: Any) -> Any:
    """One spelling for values read from PostgreSQL (psycopg) and from Delta (Spark)."""
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return ("ts", (aware - _EPOCH) // dt.timedelta(microseconds=1))
    if isinstance(value, float) and value != value:
        return ("nan",)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ("bytes", bytes(value))
    if isinstance(value, list):
        return tuple(_canonical(v) for v in value)
    return value


def _as_set(rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {tuple(sorted((k, _canonical(v)) for k, v in row.items())) for row in rows}


@pgoutput_then_wal2json_in_soak
def test_postgres_mirrors_equal_their_tables_typed_and_consistent(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
) -> None:
    _create(pg_dsn)
    root, ckpt = tmp_path / "shop", tmp_path / "ckpt"
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "postgres")
        .option("plugin", pg_plugin)
        .option("dsn", pg_dsn)
        .option("slot", "mirror_e2e")
        .option("tables", f"{ORDERS},{ITEMS}")
        .option("columnTypes", "true")
        .option("maxChangesPerTrigger", "30")
        .option("snapshotDir", str(tmp_path / "spill"))
        .load()
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", str(root))
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    workload = PgShop(pg_dsn, count=120, seed=21, special_floats=pg_plugin == "pgoutput")
    problems: list[str] = []
    versions_read: set[int] = set()
    checked: set[int] = set()  # the index versions read with both mirrors in them
    done = threading.Event()

    def read_consistently() -> None:
        # One read per checkpoint published: a read through Spark takes 1-10 s on two busy
        # cores (two time-travel snapshots and their jobs); back to back, the reader and the
        # catch-up check took the cores the query needed. A new index version is a new
        # checkpoint to read; the file listing that tells costs nothing.
        while not done.is_set():
            version = schema_migrations.published_version(root)
            if version < 0 or version in versions_read:
                done.wait(0.2)
                continue
            versions_read.add(version)
            try:
                tables = spark_ckpt.read_consistent(spark, str(root))
            except Exception as e:  # reported by the test, not lost with the thread
                problems.append(f"read_consistent raised {e!r}")
                return
            if ORDERS in tables and ITEMS in tables:
                orders = [r.asDict() for r in tables[ORDERS].select("id", "total").collect()]
                items = [
                    r.asDict() for r in tables[ITEMS].select("id", "order_id", "amount").collect()
                ]
                problems.extend(invariant_violations(orders, items))
                checked.add(version)

    def differences(read: Callable[[str], list[dict[str, Any]]]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name in (ORDERS, ITEMS):
            mirrored, source = _as_set(read(name)), _as_set(_pg_rows(pg_dsn, name))
            if mirrored != source:
                found[name] = [
                    sorted(mirrored - source, key=repr)[:3],
                    sorted(source - mirrored, key=repr)[:3],
                ]
        return found

    last: dict[str, Any] = {"version": -1, "at": 0.0, "differences": None}

    def caught_up() -> bool:
        # Compared when a checkpoint is published (or 10 s passed): with delta-rs's read of
        # the newest versions (milliseconds), then with read_consistent, which decides. Spark's
        # comparison takes 30-90 s on busy cores and wait_until sleeps twice as long as its
        # predicate took: run at every poll, it left minutes between two polls.
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        version = schema_migrations.published_version(root)
        if version < 0 or (version == last["version"] and time.monotonic() - last["at"] < 10):
            return False
        last.update(version=version, at=time.monotonic())
        try:
            found = differences(lambda name: read_delta(str(root / name)).to_pylist())
        except TableNotFoundError:
            return False  # the first checkpoints may have no mirror of a table yet
        if not found:
            tables = spark_ckpt.read_consistent(spark, str(root))
            found = differences(lambda name: [r.asDict() for r in tables[name].collect()])
        last["differences"] = found
        return not found

    def snapshot_published() -> bool:
        if query.exception() is not None:  # not 180 s of waiting for a query that is gone
            raise AssertionError(f"the query failed: {query.exception()}")
        return (root / "_checkpoints").exists()

    reader = threading.Thread(target=read_consistently, name="pg-consistent-reader", daemon=True)
    try:
        wait_until(snapshot_published, 180, "the snapshot was not published")
        workload.start()
        reader.start()
        workload.join(300)
        assert not workload.is_alive(), "the workload did not finish in 300 s"
        assert workload.error is None, workload.error
        # Both tables: the last transactions may touch items alone (a key update).
        try:
            wait_until(caught_up, 240, "the mirrors did not catch up with PostgreSQL")
        except AssertionError as e:
            raise AssertionError(
                f"{e}; only in the mirror, only in PostgreSQL: {last['differences']}"
            ) from e
        # The reader reads the last checkpoint too, whatever it read while the query streamed.
        final = schema_migrations.published_version(root)
        wait_until(
            lambda: max(checked, default=-1) >= final or bool(problems) or not reader.is_alive(),
            120,
            "the reader did not read the last checkpoint",
        )
    finally:
        done.set()
        if reader.is_alive():
            reader.join(timeout=60)
        query.stop()
    # 120 transactions at maxChangesPerTrigger=30 publish about 15 checkpoints while the reader
    # reads; a read through a fresh JVM's Spark takes up to 85 s on busy cores, so it may check
    # only one of them besides the last.
    assert len(checked) >= 2, f"the reader checked {sorted(checked)}: not while the query streamed"
    assert not problems, f"read_consistent broke the invariant: {problems[:5]}"
    tables = spark_ckpt.read_consistent(spark, str(root))
    for name in (ORDERS, ITEMS):
        mirrored = [r.asDict() for r in tables[name].collect()]
        source = _pg_rows(pg_dsn, name)
        assert _as_set(mirrored) == _as_set(source), name
        assert len(mirrored) == len(source)
    types = {f.name: f.dataType.simpleString() for f in tables[ORDERS].schema.fields}
    assert types == {
        "id": "bigint",
        "customer": "string",
        "total": "decimal(12,2)",
        "placed_at": "timestamp",
        "tags": "array<string>",
        "rating": "double",
        "note": "string",
        "channel": "string",
    }
    types = {f.name: f.dataType.simpleString() for f in tables[ITEMS].schema.fields}
    assert types == {
        "id": "bigint",
        "order_id": "bigint",
        "amount": "decimal(12,2)",
        "sku": "string",
        "blob": "binary",
        "big": "string",
    }
    # The TOASTed text survived updates that did not carry it.
    bigs = [r["big"] for r in tables[ITEMS].where("big LIKE 'toasted:%'").collect()]
    assert bigs, "no item kept its TOASTed text: the test did not exercise unchanged TOAST"
    assert all(b == BIG for b in bigs)
