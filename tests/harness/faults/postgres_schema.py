"""Kill a postgres -> delta-2pc mirror driver around schema changes, and in a rebuild.

``run_scenario(spark, dsn, workdir, plugin)`` creates two tables and runs ``Trigger.availableNow``
queries in ``mode=mirror`` on one checkpoint: a clean one in the caller's session (the snapshot,
batch 0); then a transaction renames a column, adds one with a default, widens a type and writes
rows of both tables; a driver process SIGKILLed (with its JVM and Python workers) once batch 1 is
pre-committed, before Spark completes it; a driver process that re-runs batch 1 and is SIGKILLed
in its publish, after the first mirror's commit and before the other's and the checkpoint
index's. Then a change no mirror follows in place (``products.title`` becomes an integer: the
source converts every stored value, the stream carries none) begins a rebuild, the table read
again in chunks over several batches while ``tags`` streams: a driver is SIGKILLed once that
batch (2) is pre-committed, the next in the publish that ends the rebuild (its copy of the new
table staged, not committed); a clean query in the caller's session runs to the end.
:func:`verify` then compares each mirror with its table (columns, types and rows), counts the
Delta commits that carry batch 1 in each, and the batches committed to a table more than once.
Run as a module (``python -m harness.faults.postgres_schema drive DSN ROOT CHECKPOINT SPILL
PLUGIN``) it is the driver itself.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.faults import crash

TABLES = ("public.products", "public.tags")
DDL_BATCH = 1
REBUILD_BATCH = 2


def mirror_once(spark: Any, dsn: str, root: str, checkpoint: str, spill: str, plugin: str) -> None:
    """One availableNow mirror query to the end, in ``spark`` (installed).

    A table read again after a schema change is read in chunks of 4 rows (several batches).
    """
    import spark_ckpt

    control = spark_ckpt.install(spark)
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "postgres")
        .option("plugin", plugin)
        .option("dsn", dsn)
        .option("slot", "schema_crash")
        .option("tables", ",".join(TABLES))
        .option("snapshot", "initial")
        .option("columnTypes", "true")
        .option("snapshotDir", spill)
        .option("snapshotChunkRows", "4")
        .load()
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", root)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    if not control.await_termination(query, 600):
        raise RuntimeError("the mirror query did not finish within 10 minutes")


def drive(dsn: str, root: str, checkpoint: str, spill: str, plugin: str) -> None:
    """The driver process: :func:`mirror_once` in a session of its own (a fault may kill it)."""
    import spark_ckpt

    spark = spark_ckpt.local_session("pg-schema-crash-driver")
    mirror_once(spark, dsn, root, checkpoint, spill, plugin)
    spark.stop()


def _run(dsn: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


@dataclass(frozen=True)
class Verdict:
    """What the mirrors hold after the kills.

    Attributes
    ----------
    differences
        Per table: ``(columns in the mirror, columns in PostgreSQL)`` when they differ, or the
        rows only on one side (a few of each).
    ddl_commits
        Per table: Delta commits carrying the schema change's batch (exactly one each).
    repeated
        Per table: batches committed to it more than once (none may be).
    """

    differences: dict[str, Any]
    ddl_commits: dict[str, int]
    repeated: dict[str, int]

    @property
    def ok(self) -> bool:
        """Every mirror equals its table and holds batch 1 once and no batch twice."""
        return (
            not self.differences
            and set(self.ddl_commits.values()) == {1}
            and not any(self.repeated.values())
        )


def source_table(dsn: str, name: str) -> tuple[dict[str, str], set[tuple[Any, ...]]]:
    """A PostgreSQL table's columns (name -> the Spark type it mirrors as) and its rows."""
    import psycopg

    from spark_ckpt.sources.postgres.types import spark_type

    with psycopg.connect(dsn) as conn:
        columns = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE "
            "attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            (name,),
        ).fetchall()
        with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            rows = cur.execute(f"SELECT * FROM {name}").fetchall()
    return {str(n): spark_type(str(t)) for n, t in columns}, {
        tuple(sorted(r.items())) for r in rows
    }


def mirror_table(mirror: Any) -> tuple[dict[str, str], set[tuple[Any, ...]]]:
    """A mirror's columns (name -> Spark type) and rows, from its DataFrame."""
    types = {f.name: f.dataType.simpleString() for f in mirror.schema.fields}
    return types, {tuple(sorted(r.asDict().items())) for r in mirror.collect()}


def verify(spark: Any, dsn: str, root: Path) -> Verdict:
    """Compare each mirror (as ``read_consistent`` gives it) with its PostgreSQL table."""
    from deltalake import DeltaTable

    import spark_ckpt

    tables = spark_ckpt.read_consistent(spark, str(root))
    differences: dict[str, Any] = {}
    commits: dict[str, int] = {}
    repeated: dict[str, int] = {}
    for name in TABLES:
        source_types, source = source_table(dsn, name)
        mirror_types, mirrored = mirror_table(tables[name])
        if mirror_types != source_types:
            differences[name] = (mirror_types, source_types)
        elif mirrored != source:
            differences[name] = (sorted(mirrored - source)[:3], sorted(source - mirrored)[:3])
        history = DeltaTable(str(root / name)).history()
        batches = [c["spark-ckpt.batchId"] for c in history if "spark-ckpt.batchId" in c]
        commits[name] = batches.count(DDL_BATCH)
        repeated[name] = len(batches) - len(set(batches))
    return Verdict(differences, commits, repeated)


def run_scenario(
    spark: Any, dsn: str, workdir: Path, plugin: str = "pgoutput", every_kill: bool = True
) -> Verdict:
    """Run the clean snapshot, the schema changes, the kills and the clean end; verify.

    Four kills, or with ``every_kill`` false two: after the schema change's pre-commit and in
    the rebuild (the publish's kill between the mirrors and the rebuild's pre-commit left out).
    """
    root, checkpoint, spill = workdir / "mirror", workdir / "ckpt", workdir / "spill"
    _run(
        dsn,
        "CREATE TABLE products (id integer PRIMARY KEY, name text, qty integer)",
        "CREATE TABLE tags (id integer PRIMARY KEY, label text)",
        "INSERT INTO products SELECT i, repeat('p', i), i FROM generate_series(1, 20) i",
        "INSERT INTO tags SELECT i, 't' || i FROM generate_series(1, 5) i",
    )

    def driver(fault: str | None) -> None:
        args = ["-m", "harness.faults.postgres_schema", "drive", dsn, str(root), str(checkpoint)]
        status = crash.run_killable([*args, str(spill), plugin], fault)
        if fault and status != -signal.SIGKILL:
            raise RuntimeError(f"the fault {fault} never fired")
        if not fault and status != 0:
            raise RuntimeError("a clean run was killed")

    paths = (str(root), str(checkpoint), str(spill))
    mirror_once(spark, dsn, *paths, plugin)  # the snapshot, batch 0, in the caller's session
    _run(
        dsn,
        "BEGIN",
        "ALTER TABLE products RENAME COLUMN name TO title",
        "ALTER TABLE products ADD COLUMN flag boolean NOT NULL DEFAULT true",
        "ALTER TABLE products ALTER COLUMN qty TYPE bigint",
        "UPDATE products SET qty = qty * 1000000000 WHERE id % 3 = 0",
        "INSERT INTO products VALUES (21, 'new', 21, false)",
        "DELETE FROM tags WHERE id = 2",
        "UPDATE tags SET label = 'changed' WHERE id = 3",
        "COMMIT",
    )
    driver(f"after_manifest:{DDL_BATCH}")  # pre-committed, Spark has not completed it
    _run(
        dsn,
        "BEGIN",
        "ALTER TABLE products ALTER COLUMN title TYPE integer USING length(title)",
        "UPDATE products SET qty = 0 WHERE id = 20",
        "UPDATE tags SET label = 'during' WHERE id = 4",
        "COMMIT",
        "DELETE FROM products WHERE id = 7",
        "INSERT INTO products VALUES (22, 22, 22, true)",
    )
    if every_kill:
        # Batch 1 again, its publish killed; the rebuild's first batch (2) comes only after it.
        driver(f"during_mirror:{DDL_BATCH}")  # the first mirror published, the other not
        driver(f"after_manifest:{REBUILD_BATCH}")  # the rebuild's first batch pre-committed
    # The rebuild ends in a batch the chunks' watermarks decide: any of them.
    driver(",".join(f"during_rebuild:{n}" for n in range(REBUILD_BATCH, REBUILD_BATCH + 40)))
    mirror_once(spark, dsn, *paths, plugin)  # recovers and runs to the end
    return verify(spark, dsn, root)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "drive":
        drive(*sys.argv[2:])
    else:
        raise SystemExit(
            "usage: python -m harness.faults.postgres_schema drive DSN ROOT CHECKPOINT SPILL PLUGIN"
        )
