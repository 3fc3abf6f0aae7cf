"""The debezium-json connector on a log Debezium itself writes from MariaDB (binlog, GTIDs).

Debezium 3.5.0's MariaDB connector, in the embedded engine of ``bench/debezium_writer.py``,
captures a fresh database of the test server (``mariadb_server``) and publishes record values as
JSONL files. Transactions are named by their GTID (``0-1-17``): the workload reads
``@@last_gtid`` right after each ``COMMIT``, and every transaction also inserts a ``txlog`` row
with an id of its own, so each committed transaction can be found in the Delta table under its
GTID, holding the row it wrote.
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changelog_checks import by_key, fold, whole_once
from conftest import wait_until
from debezium_harness import delta_changes, delta_txn_ids
from debezium_writer import DebeziumWriter
from mariadb_server import MariaDbServer
from pg_workload import ODD_TEXT

import spark_ckpt

if TYPE_CHECKING:
    from pymysql.cursors import Cursor
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.readwriter import DataStreamWriter

ACCOUNTS = 40
KEYS = {
    "accounts": ("id",),
    "orders": ("id",),
    "order_items": ("order_id", "line"),
    "txlog": ("id",),
}
SCHEMA = (
    "CREATE TABLE accounts (id bigint PRIMARY KEY, balance decimal(38, 12) NOT NULL, "
    "owner varchar(200), updated timestamp(6) NOT NULL DEFAULT current_timestamp(6))",
    "CREATE TABLE orders (id bigint PRIMARY KEY, account_id bigint NOT NULL, "
    "amount decimal(20, 4), note text, created datetime(6) NOT NULL, ratio double)",
    "CREATE TABLE order_items (order_id bigint, line int, sku varchar(40) NOT NULL, "
    "qty int NOT NULL, PRIMARY KEY (order_id, line))",
    "CREATE TABLE txlog (id varchar(40) PRIMARY KEY, kind varchar(16) NOT NULL)",
)
ADDED = ("orders", "tag")
"""The column the workload's DDL adds while Debezium streams: older images lack it."""

NUMERIC = ("balance", "amount")
MICROS = ("created",)  # datetime(6): io.debezium.time.MicroTimestamp, epoch microseconds
ZONED = ("updated",)  # timestamp(6): io.debezium.time.ZonedTimestamp, ISO-8601 in UTC
EPOCH = datetime(1970, 1, 1)


def exact(column: str, value: Any) -> Any:
    """A value as PyMySQL reads it, compared exactly.

    Decimals by digits and scale; ``timestamp`` (naive, in the session's zone, which is the
    server's ``+00:00``) as an instant; ``datetime`` as the naive value it is.
    """
    if isinstance(value, Decimal):
        return value.as_tuple()
    if column in ZONED and value is not None:
        return value.replace(tzinfo=timezone.utc)
    return value


def debezium_value(column: str, value: Any) -> Any:
    """A value as Debezium wrote it here, read back.

    ``decimal.handling.mode=string`` keeps the digits and the scale; under the default
    ``time.precision.mode=adaptive_time_microseconds`` a ``datetime(6)`` is microseconds since
    the epoch (negative before 1970), a ``timestamp(6)`` ISO-8601 text in UTC.
    """
    if value is None:
        return None
    if column in NUMERIC:
        return Decimal(value).as_tuple()
    if column in MICROS:
        return EPOCH + timedelta(microseconds=value)
    if column in ZONED:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


def create_schema(server: MariaDbServer, database: str) -> None:
    """The tables and the rows Debezium's initial snapshot reads (before it starts)."""
    rng = random.Random(0)
    with server.connect(database) as conn, conn.cursor() as cursor:
        for statement in SCHEMA:
            cursor.execute(statement)
        conn.begin()
        cursor.executemany(
            "INSERT INTO accounts (id, balance, owner) VALUES (%s, %s, %s)",
            [
                (
                    n,
                    f"{rng.randint(0, 10**9)}.{rng.randint(0, 10**12 - 1):012d}",
                    rng.choice(ODD_TEXT),
                )
                for n in range(ACCOUNTS)
            ],
        )
        cursor.execute("INSERT INTO txlog VALUES ('seed', 'seed')")
        conn.commit()


@dataclass
class Workload:
    """Multi-table transactions on a thread; each logs ``<name>-<n>`` in ``txlog``.

    ``committed`` maps each committed transaction's GTID to its ``txlog`` id. At transaction
    ``alter_at`` (if any) the workload first runs the DDL that adds ``orders.tag``, outside any
    transaction, and sets ``tag`` on the orders it inserts from then on.
    """

    server: MariaDbServer
    database: str
    name: str
    transactions: int
    seed: int
    alter_at: int | None = None
    pause: float = 0.0
    committed: dict[str, str] = field(default_factory=dict)
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> Workload:
        """Start on a background thread."""
        self._thread = threading.Thread(target=self._run, name=f"mariadb-{self.name}", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        """Wait (bounded) for the workload to finish; raise its error."""
        assert self._thread is not None
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"workload {self.name} did not finish within {timeout:.0f}s")
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            rng = random.Random(self.seed)
            tagged = False
            with self.server.connect(self.database) as conn, conn.cursor() as cursor:
                for number in range(self.transactions):
                    if number == self.alter_at:
                        cursor.execute("ALTER TABLE orders ADD COLUMN tag varchar(20) NULL")
                        tagged = True
                    txlog = f"{self.name}-{number}"
                    conn.begin()
                    cursor.execute("INSERT INTO txlog VALUES (%s, 'work')", (txlog,))
                    self._one(cursor, rng, number, tagged)
                    conn.commit()
                    cursor.execute("SELECT @@last_gtid")
                    row = cursor.fetchone()
                    assert row is not None
                    self.committed[str(row[0])] = txlog
                    if self.pause:
                        threading.Event().wait(self.pause)
        except BaseException as e:  # reported by join()
            self.error = e

    def _one(self, cursor: Cursor, rng: random.Random, number: int, tagged: bool) -> None:
        kind = rng.random()
        account = rng.randrange(ACCOUNTS)
        if kind < 0.45:
            order = self.seed * 1_000_000 + number
            # From 1900 to 2100: before 1970 Debezium's microseconds are negative.
            created = datetime(1900, 1, 1) + timedelta(
                microseconds=rng.randrange(200 * 365 * 86_400 * 10**6)
            )
            columns = "id, account_id, amount, note, created, ratio" + (", tag" if tagged else "")
            values = [
                order,
                account,
                f"{rng.randint(0, 10**6)}.{rng.randint(0, 9999):04d}",
                rng.choice(ODD_TEXT),
                created,
                rng.random() / 3,
            ] + ([f"tag-{number}"] if tagged else [])
            marks = ", ".join(["%s"] * len(values))
            cursor.execute(f"INSERT INTO orders ({columns}) VALUES ({marks})", values)
            cursor.executemany(
                "INSERT INTO order_items VALUES (%s, %s, %s, %s)",
                [
                    (order, line, f"sku-{rng.randint(1, 99)}", rng.randint(1, 5))
                    for line in range(rng.randint(1, 4))
                ],
            )
            cursor.execute(
                "UPDATE accounts SET balance = balance - 1.000000000001, "
                "updated = current_timestamp(6) WHERE id = %s",
                (account,),
            )
        elif kind < 0.7:
            cursor.execute(
                "UPDATE accounts SET balance = balance + %s, owner = %s, "
                "updated = current_timestamp(6) WHERE id = %s",
                (f"0.{rng.randint(0, 10**12 - 1):012d}", rng.choice(ODD_TEXT), account),
            )
        else:
            cursor.execute(
                "SELECT id FROM orders WHERE account_id = %s ORDER BY id LIMIT 1", (account,)
            )
            victim = cursor.fetchone()
            if victim is None:
                cursor.execute("UPDATE accounts SET owner = NULL WHERE id = %s", (account,))
            elif kind < 0.85:
                cursor.execute("DELETE FROM order_items WHERE order_id = %s", victim)
                cursor.execute("DELETE FROM orders WHERE id = %s", victim)
            else:
                # Primary-key changes: Debezium writes each as a delete and a create.
                moved = self.seed * 1_000_000 + 500_000 + number
                cursor.execute("UPDATE orders SET id = %s WHERE id = %s", (moved, victim[0]))
                cursor.execute(
                    "UPDATE order_items SET order_id = %s, line = line + 10 WHERE order_id = %s",
                    (moved, victim[0]),
                )


def large_transaction(server: MariaDbServer, database: str, rows: int) -> str:
    """One transaction of ``rows`` changes: inserts, deletes and a primary-key change.

    Returns its GTID; its ``txlog`` id is ``large``.
    """
    with server.connect(database) as conn, conn.cursor() as cursor:
        conn.begin()
        cursor.execute("INSERT INTO txlog VALUES ('large', 'large')")
        cursor.execute(
            "INSERT INTO orders (id, account_id, amount, note, created, ratio) "
            "VALUES (900000000, 1, 12.5000, 'large', '2024-02-29 23:59:59.999999', 0.25)"
        )
        cursor.executemany(
            "INSERT INTO order_items VALUES (900000000, %s, %s, 1)",
            [(n, f"sku-{n}") for n in range(rows - 6)],  # + txlog, order, 2 deletes, d + c
        )
        cursor.execute("DELETE FROM order_items WHERE order_id = 900000000 AND line < 2")
        cursor.execute("UPDATE accounts SET id = 7000000 WHERE id = 3")
        conn.commit()
        cursor.execute("SELECT @@last_gtid")
        row = cursor.fetchone()
        assert row is not None
        return str(row[0])


def query(spark: SparkSession, log: Path, table: Path) -> DataStreamWriter:
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", "500")
        .load(str(log))
        .writeStream.format("delta-2pc")
        .option("path", str(table))
        .trigger(processingTime="200 milliseconds")
    )


def snapshot_published(writer: DebeziumWriter) -> bool:
    """Whether the initial snapshot's last row is in a published file."""
    return any(
        value is not None and value.get("payload", {}).get("source", {}).get("snapshot") == "last"
        for value in writer.read_values()
    )


def repeated_changes(writer: DebeziumWriter) -> tuple[int, int]:
    """Change events and ``END`` records the published files hold more than once.

    A change event is named by its GTID and ``total_order``; Debezium's repeats after the
    SIGKILL are the only way one can appear twice.
    """
    changes: Counter[tuple[str, int]] = Counter()
    ends: Counter[str] = Counter()
    for value in writer.read_values():
        payload = value.get("payload") if value is not None else None
        if payload is None:
            continue
        if payload.get("status") == "END":
            ends[payload["id"]] += 1
        elif payload.get("op") in ("c", "u", "d") and payload.get("transaction"):
            block = payload["transaction"]
            changes[(block["id"], block["total_order"])] += 1
    return (
        sum(n - 1 for n in changes.values() if n > 1),
        sum(n - 1 for n in ends.values() if n > 1),
    )


def skipped_of(query: Any) -> dict[str, int]:
    """What the query's source skipped, as its last progress event reports it."""
    progress = query.lastProgress
    if progress is None:
        return {}
    latest = json.loads(progress["sources"][0]["latestOffset"])
    status = latest.get("status") or {}
    return dict(status.get("skipped") or {})


def test_a_log_debezium_wrote_from_mariadb_lands_whole_once_and_folds_to_the_tables(
    spark: SparkSession,
    control: spark_ckpt.Control,
    mariadb_server: MariaDbServer,
    mariadb_database: str,
    tmp_path: Path,
) -> None:
    """Snapshot, workload, DDL, 3,000 rows, writer SIGKILL: each GTID in one version, whole."""
    server, database = mariadb_server, mariadb_database
    create_schema(server, database)
    writer = DebeziumWriter(
        "mariadb",
        tmp_path / "log",
        tmp_path / "writer",
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password,
        database=database,
        tables=",".join(f"{database}.{name}" for name in KEYS),
        roll_records=200,
        props={"decimal.handling.mode": "string"},
    ).start()
    table = tmp_path / "table"
    committed: dict[str, str] = {}
    supervised = None
    try:
        # Ready means the task runs, not that the snapshot is read: transactions committed
        # before its binlog position would be snapshot rows, not streamed transactions.
        wait_until(lambda: snapshot_published(writer), 60, "Debezium did not publish a snapshot")
        supervised = control.supervise(
            lambda: query(spark, tmp_path / "log", table),
            checkpoint_location=str(tmp_path / "ckpt"),
            name="dbz-mariadb",
        )
        first = Workload(server, database, "first", 60, seed=1, alter_at=5, pause=0.03).start()
        published = writer.published_records()
        large = large_transaction(server, database, 3000)
        committed[large] = "large"
        # Killed while the workload runs and, most likely, while the 3,000-row transaction is
        # published in part: offsets only cover whole transactions, so Debezium writes it again
        # from its BEGIN, and the workload's transactions before it too.
        writer.wait_for_records(published + 1200, 60)
        writer.kill()
        while_down = Workload(server, database, "down", 15, seed=2).start()
        while_down.join(60)
        first.join(120)
        committed |= first.committed | while_down.committed
        writer.restart()
        second = Workload(server, database, "second", 40, seed=3).start()
        second.join(120)
        committed |= second.committed
        writer.wait_idle(2.0, 120)
        expected = {*committed, "snapshot"}

        wait_until(
            lambda: delta_txn_ids(table) >= expected,
            120,
            f"the Delta table did not catch up with {len(expected)} units",
        )
        skipped = skipped_of(supervised.query)
    finally:
        if supervised is not None:
            supervised.stop(drain=True)
        writer.close()

    # Every transaction in exactly one Delta version, whole, once; the snapshot too.
    rows = delta_changes(table)
    by_txn = whole_once(rows)
    snapshot = by_txn.pop("snapshot")
    assert {r["op"] for r in snapshot} == {"r"}
    assert Counter(r["table"] for r in snapshot) == {
        f"{database}.accounts": ACCOUNTS,
        f"{database}.txlog": 1,
    }
    # Exactly the committed GTIDs were streamed, each holding the txlog row it wrote.
    assert sorted(by_txn) == sorted(committed), "a committed transaction is missing or extra"
    logged = {
        txn_id: [json.loads(r["after"])["id"] for r in txn_rows if r["table"].endswith(".txlog")]
        for txn_id, txn_rows in by_txn.items()
    }
    assert logged == {gtid: [txlog] for gtid, txlog in committed.items()}
    assert len(by_txn[large]) == 3000, "the large transaction was not whole"

    # Debezium's repeats after the SIGKILL were dropped, each counted once.
    repeated, repeated_ends = repeated_changes(writer)
    assert skipped.get("repeats") == repeated, (
        f"the log repeats {repeated} change events ({repeated_ends} ENDs), but the source "
        f"reports skipping {skipped}"
    )

    # The change log folded by key equals each table, row for row.
    state = fold(
        rows,
        KEYS,
        debezium_value,
        table_of=lambda table: table.removeprefix(f"{database}."),
        defaults={ADDED[0]: {ADDED[1]: None}},  # rows written before the column existed
    )
    with server.connect(database) as conn, conn.cursor() as cursor:
        for name, key_columns in KEYS.items():
            cursor.execute(f"SELECT * FROM {name}")
            columns = [d[0] for d in cursor.description or ()]
            actual = by_key(columns, cursor.fetchall(), key_columns, exact)
            assert state[name] == actual, f"{name} differs from its folded change log"
