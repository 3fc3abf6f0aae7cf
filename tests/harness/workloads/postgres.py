"""A transactional workload on PostgreSQL and the checks of what reached Delta.

Used by the postgres, Debezium and Kafka integration tests, :mod:`harness.faults.postgres`,
``bench/debezium_vs_spark_json.py`` and ``bench/kafka_vs_spark_kafka.py``. The workload runs
multi-statement transactions over three tables; each also inserts its own transaction id into
``txlog``, so afterwards every committed transaction can be found in the Delta table: either
inside the snapshot (``op='r'`` rows) or as one streamed transaction (``txn_id`` = its xid).
:func:`verify` checks exactly that, and that replaying the Delta changelog onto the snapshot
reproduces every captured PostgreSQL table.
"""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import psycopg

TABLES = ("public.accounts", "public.orders", "public.order_items", "public.txlog")

SCHEMA = """
CREATE TABLE accounts (id bigint PRIMARY KEY, balance numeric(38, 12) NOT NULL, owner text,
                       updated timestamptz NOT NULL DEFAULT now());
CREATE TABLE orders (id bigint PRIMARY KEY, account_id bigint NOT NULL, amount numeric(20, 4),
                     note text, created timestamptz NOT NULL DEFAULT now(), ratio double precision);
CREATE TABLE order_items (order_id bigint, line int, sku text NOT NULL, qty int NOT NULL,
                          PRIMARY KEY (order_id, line));
CREATE TABLE txlog (xid bigint PRIMARY KEY, kind text NOT NULL);
"""

# Text that has broken CDC pipelines: quotes, backslashes, newlines, NUL-free control chars,
# non-BMP characters, JSON lookalikes.
ODD_TEXT = (
    "plain",
    'quote " and \\ backslash',
    "line\nbreak\ttab",
    "emoji \U0001f600 and accents \u00e9\u00e8",
    '{"json": "lookalike"}',
    "",
    "\u2028 line separator",
)


def create_schema(dsn: str, accounts: int = 50, seed: int = 0) -> None:
    """Create the tables and some rows (before any slot exists: the snapshot's material)."""
    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        with conn.transaction():
            for account in range(accounts):
                conn.execute(
                    "INSERT INTO accounts (id, balance, owner) VALUES (%s, %s, %s)",
                    (
                        account,
                        f"{rng.randint(0, 10**9)}.{rng.randint(0, 10**12 - 1):012d}",
                        rng.choice(ODD_TEXT),
                    ),
                )
            conn.execute("INSERT INTO txlog VALUES (pg_current_xact_id()::text::bigint, 'seed')")


@dataclass
class Workload:
    """Runs transactions on a thread until stopped or ``transactions`` are done."""

    dsn: str
    transactions: int
    seed: int = 1
    accounts: int = 50
    pause: float = 0.0
    """Seconds between transactions (spreads the workload over a query's lifetime)."""
    committed: list[int] = field(default_factory=list)
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Workload:
        """Start on a background thread."""
        self._thread = threading.Thread(target=self._run, name="pg-workload", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        """Wait for the workload to finish; raise its error."""
        assert self._thread is not None
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the workload did not finish within {timeout:.0f}s")
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """Ask the workload to stop after the current transaction."""
        self._stop.set()

    def _run(self) -> None:
        try:
            rng = random.Random(self.seed)
            next_order = 1_000_000 * self.seed
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                for _ in range(self.transactions):
                    if self._stop.is_set():
                        return
                    with conn.transaction():
                        row = conn.execute(
                            "INSERT INTO txlog VALUES (pg_current_xact_id()::text::bigint, %s) "
                            "RETURNING xid",
                            ("work",),
                        ).fetchone()
                        assert row is not None
                        next_order = self._one(conn, rng, next_order)
                    self.committed.append(int(row[0]))
                    if self.pause:
                        self._stop.wait(self.pause)
        except BaseException as e:  # reported by join()
            self.error = e

    def _one(self, conn: psycopg.Connection[Any], rng: random.Random, order: int) -> int:
        kind = rng.random()
        account = rng.randrange(self.accounts)
        if kind < 0.5:
            order += 1
            conn.execute(
                "INSERT INTO orders (id, account_id, amount, note, ratio) "
                "VALUES (%s, %s, %s, %s, %s)",
                (
                    order,
                    account,
                    f"{rng.randint(0, 10**6)}.{rng.randint(0, 9999):04d}",
                    rng.choice(ODD_TEXT),
                    rng.random() / 3,
                ),
            )
            for line in range(rng.randint(1, 4)):
                conn.execute(
                    "INSERT INTO order_items VALUES (%s, %s, %s, %s)",
                    (order, line, f"sku-{rng.randint(1, 99)}", rng.randint(1, 5)),
                )
            conn.execute(
                "UPDATE accounts SET balance = balance - 1.000000000001, updated = now() "
                "WHERE id = %s",
                (account,),
            )
        elif kind < 0.8:
            conn.execute(
                "UPDATE accounts SET balance = balance + %s, owner = %s, updated = now() "
                "WHERE id = %s",
                (f"0.{rng.randint(0, 10**12 - 1):012d}", rng.choice(ODD_TEXT), account),
            )
        else:
            victim = conn.execute(
                "SELECT id FROM orders WHERE account_id = %s ORDER BY id LIMIT 1", (account,)
            ).fetchone()
            if victim is not None:
                conn.execute("DELETE FROM order_items WHERE order_id = %s", victim)
                conn.execute("DELETE FROM orders WHERE id = %s", victim)
            else:
                conn.execute("UPDATE accounts SET owner = NULL WHERE id = %s", (account,))
        return order


@dataclass
class Verdict:
    """What :func:`verify` found."""

    transactions: int
    in_snapshot: int
    split: list[str]
    missing: list[int]
    duplicated: list[str]
    mismatched_tables: list[str]

    @property
    def ok(self) -> bool:
        """True when nothing is split, missing, duplicated or different."""
        return not (self.split or self.missing or self.duplicated or self.mismatched_tables)


def _key(text: str | None) -> str:
    return json.dumps(json.loads(text or "null"), sort_keys=True)


def verify(spark: Any, table_path: str, dsn: str, committed: list[int]) -> Verdict:
    """Check the Delta table against PostgreSQL (see the module docstring)."""
    from deltalake import DeltaTable
    from pyspark.sql.functions import input_file_name

    from spark_ckpt.sources.postgres.row_text import copy_rows
    from spark_ckpt.sources.postgres.tables import describe_tables

    # Which Delta version added each file (the sink only ever adds files).
    table = DeltaTable(table_path)
    version_of: dict[str, int] = {}
    seen: set[str] = set()
    for version in range(table.version() + 1):
        files = set(DeltaTable(table_path, version=version).file_uris())
        for uri in files - seen:
            version_of[uri.rsplit("/", 1)[-1]] = version
        seen |= files
    rows = (
        spark.read.format("delta").load(table_path).withColumn("file", input_file_name()).collect()
    )
    by_txn: dict[str, list[Any]] = defaultdict(list)
    for row in rows:
        by_txn[row.txn_id].append(row)
    split, duplicated = [], []
    for txn_id, txn_rows in by_txn.items():
        versions = {version_of[r.file.rsplit("/", 1)[-1]] for r in txn_rows}
        indexes = sorted(r.event_index for r in txn_rows)
        if len(versions) != 1:
            split.append(txn_id)
        if indexes != list(range(txn_rows[0].txn_size)):
            duplicated.append(txn_id)  # an event twice (or one missing)
    snapshot_xids = {
        json.loads(r.after)["xid"] for r in rows if r.op == "r" and r.table == "public.txlog"
    }
    streamed = {int(t) for t in by_txn if not t.startswith("snapshot:")}
    missing = [x for x in committed if x not in streamed and x not in snapshot_xids]
    duplicated += [str(x) for x in streamed & snapshot_xids]

    # Replay the changelog onto the snapshot and compare with the tables.
    state: dict[str, dict[str, Any]] = defaultdict(dict)
    for row in sorted(rows, key=lambda r: (r.txn_order, r.event_index)):
        if row.op == "d":
            state[row.table].pop(_key(row.key), None)
        else:
            state[row.table][_key(row.key)] = json.loads(row.after)
    mismatched = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for info in describe_tables(conn, list(TABLES)):
            actual = {}
            # Rendered as the snapshot renders rows: the stream's rows must read the same.
            for _, afters in copy_rows(conn, info, info.select_text()):
                for text in afters.to_pylist():
                    value = json.loads(text)
                    actual[json.dumps({k: value[k] for k in info.key}, sort_keys=True)] = value
            if actual != state[info.name]:
                mismatched.append(info.name)
    return Verdict(len(by_txn), len(snapshot_xids), split, missing, duplicated, mismatched)
