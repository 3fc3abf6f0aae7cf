"""Transactions on MySQL or MariaDB for the mysql connector's tests, and their checks.

``create_tables`` makes ``orders`` and ``items`` (and ``other``, never captured);
``run_transactions`` commits a seeded mix of multi-table transactions (inserts, updates,
deletes, primary-key updates, a rollback now and then, writes to ``other``); ``verify`` reads the
change log in Delta (delta-rs) and checks every committed transaction landed whole in exactly one
version, once and in commit order, and that the log folded by key equals the tables.
"""

from __future__ import annotations

import json
import random
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.servers.mariadb import MariaDbServer

__all__ = ["KEYS", "create_tables", "fold", "run_transactions", "source_rows", "verify"]

KEYS = ("orders", "items")
"""The captured tables (each keyed by ``id``)."""


def create_tables(server: MariaDbServer, database: str) -> None:
    """``orders``, ``items`` and ``other`` (not captured), with a row in ``orders``."""
    for sql in (
        "CREATE TABLE orders (id int PRIMARY KEY, customer varchar(20), amount decimal(10,2), "
        "placed datetime(6))",
        "CREATE TABLE items (id bigint unsigned PRIMARY KEY, order_id int, qty int, note text)",
        "CREATE TABLE other (id int PRIMARY KEY, v int)",
        "INSERT INTO orders VALUES (1, 'before', 1.00, '2026-01-01 00:00:00')",
    ):
        server.execute(sql, database)


def run_transactions(server: MariaDbServer, database: str, count: int, seed: int) -> int:
    """Commit ``count`` transactions of captured changes (seeded); return how many committed.

    Each changes at least one captured row; every fifth is followed by a rolled-back one and a
    write to ``other``, neither of which may ever be delivered.
    """
    rng = random.Random(seed)
    base = seed * 100_000
    with server.connect(database) as conn, conn.cursor() as cursor:
        for n in range(count):
            conn.begin()
            order = base + n
            cursor.execute(
                "INSERT INTO orders VALUES (%s, %s, %s, %s)",
                (
                    order,
                    f"c{rng.randrange(50)}",
                    Decimal(rng.randrange(1, 10**6)) / 100,
                    datetime(2026, 11, 28, 10, rng.randrange(60), rng.randrange(60), n),
                ),
            )
            for item in range(rng.randrange(1, 4)):
                cursor.execute(
                    "INSERT INTO items VALUES (%s, %s, %s, %s)",
                    (order * 10 + item, order, rng.randrange(1, 9), f"n{n}" if item else None),
                )
            if n and rng.random() < 0.4:
                cursor.execute("UPDATE orders SET amount = amount + 1 WHERE id = %s", (order - 1,))
            if n > 2 and rng.random() < 0.3:
                cursor.execute("DELETE FROM items WHERE order_id = %s", (order - 2,))
            if n > 3 and rng.random() < 0.2:  # a primary-key update
                cursor.execute("UPDATE orders SET id = id + 50000 WHERE id = %s", (order - 3,))
            conn.commit()
            if n % 5 == 4:
                conn.begin()
                cursor.execute("INSERT INTO orders VALUES (%s, 'rolled back', 0, NULL)", (-n,))
                conn.rollback()
                cursor.execute("REPLACE INTO other VALUES (%s, %s)", (n % 3, n))
    return count


def _value(value: Any) -> Any:
    """A source value as the connector writes it (its JSON rules, for these tables' types).

    ``placed`` is a ``DATETIME(6)``: printed with its six digits, as MySQL prints it.
    """
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="microseconds")
    return value


def source_rows(
    server: MariaDbServer, database: str, table: str, *, as_json: bool = True
) -> dict[Any, dict[str, Any]]:
    """A table's rows by ``id``, values as the connector writes them.

    With ``as_json=False`` values are as PyMySQL returns them: the forms a typed mirror holds
    (``Decimal``, ``datetime``).
    """
    with server.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table}")
        columns = [d[0] for d in cursor.description or ()]
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    convert = _value if as_json else (lambda value: value)
    return {row["id"]: {c: convert(v) for c, v in row.items()} for row in rows}


def fold(rows: list[dict[str, Any]]) -> dict[str, dict[Any, Any]]:
    """The change log replayed by ``id`` in commit order (a key update moves the row)."""
    state: dict[str, dict[Any, Any]] = {name: {} for name in KEYS}
    for row in sorted(rows, key=lambda r: (r["txn_order"], r["event_index"])):
        of_table = state[row["table"].split(".")[1]]
        if row["before"] is not None:
            of_table.pop(json.loads(row["before"])["id"], None)
        if row["after"] is not None:
            after = json.loads(row["after"])
            of_table[after["id"]] = after
    return state


def verify(table: Path, server: MariaDbServer, database: str, committed: int) -> list[str]:
    """What is wrong with the change log at ``table`` (empty: nothing).

    ``committed``: the transactions of captured changes committed since the query's first start;
    the rows ``orders`` held before it (its row 1) are left out of the comparison unless changed.
    """
    from harness.faults.debezium import delta_changes

    rows = delta_changes(table)
    problems = []
    by_txn: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_txn.setdefault(row["txn_id"], []).append(row)
    for txn_id, txn_rows in by_txn.items():
        if len({r["version"] for r in txn_rows}) != 1:
            problems.append(f"transaction {txn_id} is split over versions")
        if sorted(r["event_index"] for r in txn_rows) != list(range(txn_rows[0]["txn_size"])):
            problems.append(f"transaction {txn_id} is not whole once")
    if len(by_txn) != committed:
        problems.append(f"{len(by_txn)} transactions landed, {committed} were committed")
    orders = sorted({(r["txn_order"], r["version"]) for r in rows})
    if [o for o, _ in orders] != list(range(len(by_txn))):
        problems.append("txn_order is not 0..n-1, one per transaction")
    if [v for _, v in orders] != sorted(v for _, v in orders):
        problems.append("a later transaction is in an earlier Delta version")
    if any("rolled back" in (r["after"] or "") or r["table"].endswith(".other") for r in rows):
        problems.append("a rolled-back or uncaptured change was delivered")
    folded = fold(rows)
    for name in KEYS:
        source = source_rows(server, database, name)
        if name == "orders" and 1 not in folded[name]:
            source.pop(1, None)  # the row from before the first start, never changed since
        mirrored = folded[name]
        if mirrored != source:
            wrong = sorted(k for k in {*mirrored, *source} if mirrored.get(k) != source.get(k))
            problems.append(f"{name} folds to another table at ids {wrong[:5]}")
    return problems
