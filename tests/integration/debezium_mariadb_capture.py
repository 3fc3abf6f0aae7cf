"""Debezium capturing the test MariaDB server: what the Debezium integration tests share.

Debezium 3.5.0's MariaDB connector, in the embedded engine of ``harness.workloads.debezium``,
captures a fresh database of the test server (``mariadb_server``) and publishes record values as
JSONL files, decimals as strings (``decimal.handling.mode=string``). Transactions are named by
their GTID (``0-1-17``): the workload reads ``@@last_gtid`` right after each ``COMMIT``, and every
transaction also inserts a ``txlog`` row with an id of its own, so each committed transaction can
be found in the Delta table under its GTID, holding the row it wrote.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from changelog_checks import Row, by_key, fold

from harness.servers.mariadb import MariaDbServer
from harness.workloads.debezium import DebeziumWriter
from harness.workloads.postgres import ODD_TEXT

if TYPE_CHECKING:
    from pymysql.cursors import Cursor

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


def create_schema(server: MariaDbServer, database: str, accounts: int = ACCOUNTS) -> None:
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
                for n in range(accounts)
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
    accounts: int = ACCOUNTS
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
        account = rng.randrange(self.accounts)
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


def snapshot_published(writer: DebeziumWriter) -> bool:
    """Whether the initial snapshot's last row is in a published file."""
    return any(
        value is not None and value.get("payload", {}).get("source", {}).get("snapshot") == "last"
        for value in writer.read_values()
    )


def writer_for(server: MariaDbServer, database: str, tmp_path: Path) -> DebeziumWriter:
    """Debezium on ``database``'s tables (``KEYS``); decimals as exact strings."""
    return DebeziumWriter(
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
    )


def assert_folds_to_tables(rows: Sequence[Row], server: MariaDbServer, database: str) -> None:
    """The change log folded by key equals each table (``SELECT *``), row for row."""
    tables = {}
    with server.connect(database) as conn, conn.cursor() as cursor:
        for name in KEYS:
            cursor.execute(f"SELECT * FROM {name}")
            tables[name] = ([d[0] for d in cursor.description or ()], cursor.fetchall())
    added = ADDED[1] in tables[ADDED[0]][0]
    state = fold(
        rows,
        KEYS,
        debezium_value,
        table_of=lambda table: table.removeprefix(f"{database}."),
        # Images written before the column existed lack it: null there, as in the table.
        defaults={ADDED[0]: {ADDED[1]: None}} if added else None,
    )
    for name, (columns, records) in tables.items():
        actual = by_key(columns, records, KEYS[name], exact)
        assert state[name] == actual, f"{name} differs from its folded change log"


@dataclass
class MariaDbCapture:
    """One test database, its workloads and checks, as ``test_debezium_driver_kill`` runs them."""

    server: MariaDbServer
    database: str
    accounts: int = ACCOUNTS

    @property
    def accounts_table(self) -> str:
        """The accounts table's name in the change log."""
        return f"{self.database}.accounts"

    def create_schema(self) -> None:
        create_schema(self.server, self.database, self.accounts)

    def writer(self, tmp_path: Path) -> DebeziumWriter:
        return writer_for(self.server, self.database, tmp_path)

    def start_workload(
        self, name: str, transactions: int, seed: int
    ) -> Callable[[float], list[str]]:
        """Start a workload (0.05 s between transactions); returns a join giving its GTIDs."""
        workload = Workload(
            self.server,
            self.database,
            name,
            transactions,
            seed=seed,
            pause=0.05,
            accounts=self.accounts,
        ).start()

        def join(timeout: float) -> list[str]:
            workload.join(timeout)
            return list(workload.committed)

        return join

    def large_transaction(self, rows: int) -> str:
        return large_transaction(self.server, self.database, rows)

    def assert_folds_to_tables(self, rows: Sequence[Row]) -> None:
        assert_folds_to_tables(rows, self.server, self.database)
