"""Kill a postgres -> delta-2pc mirror driver between a schema change and its publish.

``run_scenario(spark, dsn, workdir, plugin)`` creates two tables and runs four
``Trigger.availableNow`` queries in ``mode=mirror`` on one checkpoint: a clean one in the
caller's session (the snapshot, batch 0); then a transaction renames a column, adds one with a
default, widens a type and writes rows of both tables; a driver process SIGKILLed (with its JVM
and Python workers) once batch 1 is pre-committed, before Spark completes it; a driver process
that re-runs batch 1 and is SIGKILLed in its publish, after the first mirror's commit and before
the other's and the checkpoint index's; a clean query in the caller's session to the end.
:func:`verify` then compares each mirror with its table (columns, types and rows) and counts the
Delta commits that carry batch 1 in each. Run as a script
(``pg_schema_crash.py drive DSN ROOT CHECKPOINT SPILL PLUGIN``) it is the driver itself.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import crash_harness

TABLES = ("public.products", "public.tags")
DDL_BATCH = 1


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
    """

    differences: dict[str, Any]
    ddl_commits: dict[str, int]

    @property
    def ok(self) -> bool:
        """Every mirror equals its table and holds the schema change's batch once."""
        return not self.differences and set(self.ddl_commits.values()) == {1}


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
    for name in TABLES:
        source_types, source = source_table(dsn, name)
        mirror_types, mirrored = mirror_table(tables[name])
        if mirror_types != source_types:
            differences[name] = (mirror_types, source_types)
        elif mirrored != source:
            differences[name] = (sorted(mirrored - source)[:3], sorted(source - mirrored)[:3])
        history = DeltaTable(str(root / name)).history()
        commits[name] = sum(1 for c in history if c.get("spark-ckpt.batchId") == DDL_BATCH)
    return Verdict(differences, commits)


def run_scenario(spark: Any, dsn: str, workdir: Path, plugin: str = "pgoutput") -> Verdict:
    """Run the clean snapshot, the schema change, two kills and the clean end; verify."""
    root, checkpoint, spill = workdir / "mirror", workdir / "ckpt", workdir / "spill"
    _run(
        dsn,
        "CREATE TABLE products (id integer PRIMARY KEY, name text, qty integer)",
        "CREATE TABLE tags (id integer PRIMARY KEY, label text)",
        "INSERT INTO products SELECT i, 'p' || i, i FROM generate_series(1, 20) i",
        "INSERT INTO tags SELECT i, 't' || i FROM generate_series(1, 5) i",
    )

    def driver(fault: str | None) -> None:
        args = [__file__, "drive", dsn, str(root), str(checkpoint), str(spill), plugin]
        status = crash_harness.run_killable(args, fault)
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
    driver(f"during_mirror:{DDL_BATCH}")  # the first mirror published, the other not
    mirror_once(spark, dsn, *paths, plugin)  # recovers and runs to the end
    return verify(spark, dsn, root)


@dataclass(frozen=True)
class RebuildVerdict:
    """What the mirrors hold after the kills in a rebuild.

    Attributes
    ----------
    differences
        As :attr:`Verdict.differences`.
    repeated
        Per table: batches committed to it more than once (none may be).
    """

    differences: dict[str, Any]
    repeated: dict[str, int]

    @property
    def ok(self) -> bool:
        """Every mirror equals its table and no batch was committed twice."""
        return not self.differences and not any(self.repeated.values())


def run_rebuild_scenario(
    spark: Any, dsn: str, workdir: Path, plugin: str = "wal2json"
) -> RebuildVerdict:
    """A change no mirror follows in place, kills in the rebuild it starts, the clean end.

    ``products.name`` becomes an integer (PostgreSQL converts every stored value; the stream
    carries none), so the connector reads the table again in chunks over several batches while
    ``tags`` streams. A driver is SIGKILLed once the batch with the change is pre-committed;
    the next is SIGKILLed in the publish of the batch that ends the rebuild, its copy of the new
    table staged and not committed; a clean query runs to the end.
    """
    root, checkpoint, spill = workdir / "mirror", workdir / "ckpt", workdir / "spill"
    _run(
        dsn,
        "CREATE TABLE products (id integer PRIMARY KEY, name text, qty integer)",
        "CREATE TABLE tags (id integer PRIMARY KEY, label text)",
        "INSERT INTO products SELECT i, repeat('p', i), i FROM generate_series(1, 20) i",
        "INSERT INTO tags SELECT i, 't' || i FROM generate_series(1, 5) i",
    )
    paths = (str(root), str(checkpoint), str(spill))
    mirror_once(spark, dsn, *paths, plugin)  # the snapshot, batch 0
    _run(
        dsn,
        "BEGIN",
        "ALTER TABLE products ALTER COLUMN name TYPE integer USING length(name)",
        "UPDATE products SET qty = 0 WHERE id = 20",
        "UPDATE tags SET label = 'changed' WHERE id = 3",
        "COMMIT",
        "DELETE FROM products WHERE id = 7",
        "INSERT INTO products VALUES (21, 21, 21)",
        "UPDATE tags SET label = 'later' WHERE id = 4",
    )
    args = [__file__, "drive", dsn, *paths, plugin]
    if crash_harness.run_killable(args, f"after_manifest:{DDL_BATCH}") != -signal.SIGKILL:
        raise RuntimeError(f"the fault after_manifest:{DDL_BATCH} never fired")
    anywhere = ",".join(f"during_rebuild:{n}" for n in range(DDL_BATCH, DDL_BATCH + 40))
    if crash_harness.run_killable(args, anywhere) != -signal.SIGKILL:
        raise RuntimeError("no batch published the rebuild")
    mirror_once(spark, dsn, *paths, plugin)  # recovers and runs to the end
    from deltalake import DeltaTable

    repeated = {}
    for name in TABLES:
        batches = [c.get("spark-ckpt.batchId") for c in DeltaTable(str(root / name)).history()]
        ours = [b for b in batches if b is not None]
        repeated[name] = len(ours) - len(set(ours))
    return RebuildVerdict(verify(spark, dsn, root).differences, repeated)


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "drive":
        drive(*sys.argv[2:])
    else:
        raise SystemExit("usage: pg_schema_crash.py drive DSN ROOT CHECKPOINT SPILL PLUGIN")
