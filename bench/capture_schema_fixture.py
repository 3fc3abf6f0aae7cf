"""Capture what PostgreSQL's logical decoding sends across schema changes, as a test fixture.

A fresh server gets ``public.products`` and two slots, one pgoutput and one wal2json, with the
options the connector decodes with. Each migration step (DDL, then a few writes) is followed by
a consuming read of both slots and a description of the table from the catalog as the connector
asks for it (:meth:`SchemaCatalog.describe`). The rows (pgoutput's messages as hex), the
descriptions and ``format_type`` of every type the relation messages name go to ``--out`` (by
default ``tests/fixtures/postgres/schema-changes-<major>.json``, the unit tests' fixture), so the
tests replay the server's real output step by step, each step's catalog as it was then.

Run: ``python bench/capture_schema_fixture.py`` (needs PostgreSQL with wal2json, as the test
setup installs them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import struct
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from harness.servers.postgres import PgCluster
from spark_ckpt.sources.postgres.decoding.pgoutput import PLUGIN_OPTIONS as PGOUTPUT_OPTIONS
from spark_ckpt.sources.postgres.decoding.wal2json import PLUGIN_OPTIONS as WAL2JSON_OPTIONS
from spark_ckpt.sources.postgres.schema_tracking import SchemaCatalog

ROOT = Path(__file__).resolve().parents[1]
STEPS: list[tuple[str, list[str]]] = [
    ("add a nullable column", ["ALTER TABLE products ADD COLUMN note text"]),
    (
        "add a column with a default",
        ["ALTER TABLE products ADD COLUMN flag boolean NOT NULL DEFAULT true"],
    ),
    ("rename a column", ["ALTER TABLE products RENAME COLUMN name TO title"]),
    ("drop a column", ["ALTER TABLE products DROP COLUMN price"]),
    (
        "drop a column and add one of the same name",
        ["ALTER TABLE products DROP COLUMN note", "ALTER TABLE products ADD COLUMN note integer"],
    ),
    ("widen integer to bigint", ["ALTER TABLE products ALTER COLUMN qty TYPE bigint"]),
    (
        "widen numeric and lengthen a varchar",
        [
            "ALTER TABLE products ALTER COLUMN amount TYPE numeric(14,2)",
            "ALTER TABLE products ALTER COLUMN sku TYPE varchar(40)",
        ],
    ),
    (
        "add a column with a default, rewritten by a type change in one transaction",
        [
            "BEGIN",
            "ALTER TABLE products ADD COLUMN code text DEFAULT 'c0'",
            "ALTER TABLE products ALTER COLUMN qty TYPE numeric(20,0)",
            "COMMIT",
        ],
    ),
    (
        "add a column with a volatile default",
        ["ALTER TABLE products ADD COLUMN r float8 DEFAULT random()"],
    ),
    (
        "change a type to one no widening reaches",
        ["ALTER TABLE products ALTER COLUMN sku TYPE integer USING length(sku)"],
    ),
]
WRITES = [
    "UPDATE products SET id = id WHERE id = 1",
    "INSERT INTO products (id) VALUES ((SELECT max(id) + 1 FROM products))",
]


def _consume(
    conn: psycopg.Connection[Any], slot: str, binary: bool, options: tuple[str, ...]
) -> list[Any]:
    function = "pg_logical_slot_get_binary_changes" if binary else "pg_logical_slot_get_changes"
    placeholders = ", ".join(["%s"] * len(options))
    rows = conn.execute(
        f"SELECT lsn::text, xid::text::bigint, data "
        f"FROM {function}(%s, NULL, NULL, {placeholders})",
        (slot, *options),
    ).fetchall()
    return [[lsn, xid, bytes(data).hex() if binary else data] for lsn, xid, data in rows]


def capture(out: Path) -> None:
    """Run the steps and write the fixture."""
    with PgCluster(tempfile.mkdtemp(prefix="pg-schema-fixture-")) as cluster:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            version = conn.execute("SHOW server_version_num").fetchone()
            assert version is not None
            conn.execute(
                "CREATE TABLE products (id integer PRIMARY KEY, name text, price numeric(10,2), "
                "qty integer, sku varchar(10), amount numeric(8,2))"
            )
            conn.execute(
                "INSERT INTO products SELECT i, 'p' || i, i, i, 's' || i, i "
                "FROM generate_series(1, 3) i"
            )
            conn.execute("CREATE PUBLICATION schema_pub FOR TABLE products")
            conn.execute("SELECT pg_create_logical_replication_slot('pgout', 'pgoutput')")
            conn.execute("SELECT pg_create_logical_replication_slot('w2j', 'wal2json')")
            pgoutput_options = (*PGOUTPUT_OPTIONS, "publication_names", "schema_pub")
            catalog = SchemaCatalog(dsn)
            first = catalog.describe("public.products")
            steps: list[dict[str, Any]] = []
            for name, statements in STEPS:
                for statement in [*statements, *WRITES]:
                    conn.execute(statement)
                described = catalog.describe("public.products")
                assert described is not None
                steps.append(
                    {
                        "step": name,
                        "statements": statements,
                        "pgoutput": _consume(conn, "pgout", True, pgoutput_options),
                        "wal2json": _consume(conn, "w2j", False, WAL2JSON_OPTIONS),
                        "catalog": dataclasses.asdict(described),
                    }
                )
            types: dict[str, str] = {}
            for step in steps:
                for _, _, data in step["pgoutput"]:
                    raw = bytes.fromhex(data)
                    if raw[:1] == b"R":
                        for oid, typmod in _relation_types(raw):
                            row = conn.execute(
                                "SELECT format_type(%s::oid, %s::int)", (oid, typmod)
                            ).fetchone()
                            assert row is not None
                            types[f"{oid},{typmod}"] = str(row[0])
            catalog.close()
    fixture = {
        "server_version_num": int(version[0]),
        "initial_catalog": dataclasses.asdict(first) if first else None,
        "types": types,
        "steps": steps,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {out}")


def _relation_types(data: bytes) -> list[tuple[int, int]]:
    at = 5
    for _ in range(2):  # namespace, relation name
        at = data.index(0, at) + 1
    at += 1  # replica identity
    (count,) = struct.unpack_from(">h", data, at)
    at += 2
    found = []
    for _ in range(count):
        at += 1  # flags
        at = data.index(0, at) + 1
        oid, typmod = struct.unpack_from(">Ii", data, at)
        at += 8
        found.append((oid, typmod))
    return found


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    capture(args.out or ROOT / "tests" / "fixtures" / "postgres" / "schema-changes-15.json")
