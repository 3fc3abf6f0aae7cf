"""The migration sequences the schema change tests run, per database, and their tables.

PostgreSQL's is run by the ``postgres`` connector's test and, through Debezium, by the
``debezium-json`` one; each step is a list of statements followed by ordinary writes.
"""

from __future__ import annotations

from decimal import Decimal

import psycopg

PRODUCTS, TAGS = "public.products", "public.tags"

POSTGRES_STEPS: list[tuple[str, list[str]]] = [
    (
        "add a nullable column",
        ["ALTER TABLE products ADD COLUMN note text", "UPDATE products SET note = 'n' || id"],
    ),
    (
        "add a column with a default existing rows read",
        [
            "ALTER TABLE products ADD COLUMN flag boolean NOT NULL DEFAULT true",
            "INSERT INTO products (id, name, price, qty, sku, amount, flag) "
            "VALUES (100, 'late', 1.00, 1, 's100', 2.50, false)",
        ],
    ),
    (
        "rename a column",
        [
            "ALTER TABLE products RENAME COLUMN name TO title",
            "UPDATE products SET qty = qty + 1 WHERE id % 2 = 0",
        ],
    ),
    (
        "drop a column",
        [
            "ALTER TABLE products DROP COLUMN price",
            "INSERT INTO products (id, title, qty, sku, amount) VALUES (101, 'x', 3, 's', 1.25)",
        ],
    ),
    (
        "drop a column and add one of the same name",
        [
            "ALTER TABLE products DROP COLUMN note",
            "ALTER TABLE products ADD COLUMN note integer",
            "UPDATE products SET note = id * 10 WHERE id < 4",
        ],
    ),
    (
        "widen integer to bigint and numeric precision, lengthen a varchar",
        [
            "ALTER TABLE products ALTER COLUMN qty TYPE bigint",
            "ALTER TABLE products ALTER COLUMN amount TYPE numeric(14,2)",
            "ALTER TABLE products ALTER COLUMN sku TYPE varchar(40)",
            "UPDATE products SET qty = 5000000000, sku = repeat('k', 30) WHERE id = 1",
        ],
    ),
    (
        "DDL and DML in one transaction",
        [
            "BEGIN",
            "ALTER TABLE products ADD COLUMN code text DEFAULT 'c0'",
            "UPDATE products SET code = 'c' || id WHERE id = 2",
            "DELETE FROM products WHERE id = 3",
            "COMMIT",
        ],
    ),
]


def create_postgres_tables(dsn: str) -> None:
    """``products`` (8 rows) and ``tags`` (2 rows) in the database of ``dsn``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE products (id integer PRIMARY KEY, name text, price numeric(10,2), "
            "qty integer, sku varchar(10), amount numeric(8,2))"
        )
        conn.execute("CREATE TABLE tags (id integer PRIMARY KEY, label text)")
        conn.execute("INSERT INTO tags VALUES (1, 'one'), (2, 'two')")
        for i in range(1, 9):
            conn.execute(
                "INSERT INTO products VALUES (%s, %s, %s, %s, %s, %s)",
                (i, f"p{i}", Decimal(i) + Decimal("0.25"), i, f"s{i}", Decimal(i) / 4),
            )


def run_postgres(dsn: str, statements: list[str]) -> None:
    """Run ``statements`` in order in autocommit mode (``BEGIN``/``COMMIT`` make a transaction)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)
