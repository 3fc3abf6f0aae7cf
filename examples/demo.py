"""The spark-ckpt demo: a transactional change log streamed into Delta Lake, transaction-atomic.

Generates a Debezium-format change log in a temporary directory (transactions of varied sizes,
interleaved, spanning files, one whose END arrives in a later file than its events), streams it
through ``txn-cdc`` (soft cap ``maxChangesPerTrigger``) into a ``delta-2pc`` table, then reads the
table back with delta-spark and prints each Delta version with the transactions it holds. Finally
it streams the same log with the gate off (batches cut exactly at the cap) to show what the gate
prevents, and streams a shop's log in mirror mode: one Delta table per source table, read back
consistently with ``spark_ckpt.read_consistent``.

Run it through the README's main command (``./scripts/demo.sh``).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import spark_ckpt
from spark_ckpt import local_session
from spark_ckpt.testing.debezium_log import random_log, write_log
from spark_ckpt.testing.shop_workload import ShopWorkload, invariant_violations


class Clock:
    """Where the demo's time goes: each step's seconds, printed as it ends and at the end."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, float]] = []
        self._since = time.monotonic()

    def lap(self, step: str) -> None:
        """Close ``step`` (driver, once per step): print its seconds and keep them."""
        now = time.monotonic()
        self.steps.append((step, now - self._since))
        self._since = now
        print(f"   [{step}: {self.steps[-1][1]:.1f} s]")

    def summary(self) -> str:
        """One line: every step's seconds, then the total."""
        parts = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in self.steps)
        return f"time: {parts}; total {sum(s for _, s in self.steps):.1f} s"


def versions_of(spark: Any, table: Path) -> list[tuple[int, list[tuple[str, int, int, int]]]]:
    """Each Delta version with what it added: (txn_id, txn_order, rows, txn_size) per transaction.

    Two reads instead of one per version (time travel cost a Spark job per version, which was
    most of the demo's time): the newest version with delta-spark, each row with the data file it
    is in, and the table's Delta log (its JSON commit files) for the version that added each file.
    Both tables here only ever add files (checked), so version ``v`` shows what versions ``0..v``
    added, and a transaction visible in part in any version shows up with rows < txn_size.
    """
    from pyspark.sql import functions as sf

    # The commit files by name, not a glob: Spark looks for a streaming sink's metadata under a
    # single path it is given, and logs a glob's FileNotFoundException with its stack trace.
    commits = spark.read.json(sorted(str(f) for f in (table / "_delta_log").glob("*.json")))
    if "remove" in commits.columns and commits.where("remove IS NOT NULL").count():
        raise SystemExit(f"a version of {table} removed files: what each version added differs")
    added_by = commits.where("add IS NOT NULL").select(
        sf.regexp_extract(sf.col("_metadata.file_name"), r"^(\d+)\.json$", 1)
        .cast("int")
        .alias("version"),
        sf.regexp_extract(sf.col("add.path"), r"([^/]+)$", 1).alias("file"),
    )
    rows = (
        spark.read.format("delta")
        .load(str(table))
        .select("txn_id", "txn_order", "txn_size", sf.col("_metadata.file_name").alias("file"))
        .join(added_by, "file")
        .groupBy("version", "txn_id", "txn_order", "txn_size")
        .count()
        .collect()
    )
    added: dict[int, list[tuple[str, int, int, int]]] = {}
    for r in rows:
        added.setdefault(r.version, []).append((r.txn_id, r.txn_order, r["count"], r.txn_size))
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").select("version").collect()
    versions = sorted(entry.version for entry in history)
    return [(v, sorted(added.get(v, []), key=lambda item: item[1])) for v in versions]


def stream_ungated(spark: Any, log: Path, table: Path, checkpoint: Path, cap: int) -> None:
    """Stream the whole log with the gate off into Spark's own Delta sink (driver, once).

    Each batch becomes one Delta version, so the versions show where the batches were cut.
    """
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", str(cap))
        .option("gate", "off")
        .load(str(log))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )
    if not query.awaitTermination(600):
        query.stop()
        raise SystemExit("the demo query did not finish within 10 minutes")
    if query.exception() is not None:
        raise SystemExit(f"the demo query failed: {query.exception()}")


def describe(added: list[tuple[str, int, int, int]]) -> str:
    """``id[size]`` for a whole transaction, ``id(rows/size)`` for a part of one."""
    return " ".join(
        f"{txn}[{size}]" if rows == size else f"{txn}({rows}/{size})"
        for txn, _, rows, size in added
    )


def show_mirrors(spark: Any, control: spark_ckpt.Control, tmp: Path, seed: int) -> bool:
    """Stream a shop's change log in mirror mode; print the mirrors next to the change log."""
    print("\n== mode=mirror: the same kind of stream applied by primary key, one Delta table per")
    print("   source table, every table as of the same checkpoint ==")
    workload = ShopWorkload(seed=seed)
    records: list[dict[str, Any]] = []
    for number in range(60):
        records += workload.debezium_records(workload.step(), f"shop-{number}", number)
    log, root = tmp / "shop-changes", tmp / "lake" / "shop"
    write_log(str(log), records, [len(records) // 2])
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", "40")
        .load(str(log))
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", str(root))
        .option("checkpointLocation", str(tmp / "ckpt-shop"))
        .trigger(availableNow=True)
        .start()
    )
    if not control.await_termination(query, 600):
        raise SystemExit("the mirror query did not finish within 10 minutes")
    tables = spark_ckpt.read_consistent(spark, str(root))
    change_log = spark.read.format("delta").load(str(root / "_changes")).count()
    print(f"change log {root / '_changes'}: {change_log} change events")
    ok = True
    for name, frame in tables.items():
        rows = [r.asDict() for r in frame.collect()]
        expected = list(workload.rows[name].values())
        same = {tuple(sorted(r.items())) for r in rows} == {
            tuple(sorted(r.items())) for r in expected
        }
        ok &= same
        print(
            f"mirror {name}: {len(rows)} rows ({frame.schema.simpleString()}); "
            f"{'equal to' if same else 'DIFFERENT FROM'} the source table"
        )
    orders = [r.asDict() for r in tables["public.orders"].collect()]
    items = [r.asDict() for r in tables["public.items"].collect()]
    broken = invariant_violations(orders, items)
    ok &= not broken
    print(
        f"-> read_consistent: every order's total is the sum of its items: "
        f"{'yes' if not broken else broken[:3]}"
    )
    return ok


def main() -> None:
    """Generate the log, stream it gated and ungated, print the batches."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=40)
    parser.add_argument("--max-changes-per-trigger", type=int, default=25)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--connect", action="store_true", help="run through a local Spark Connect server"
    )
    args = parser.parse_args()

    rng = random.Random(args.seed)
    records, expected = random_log(
        rng, args.transactions, max_size=14, interleave=4, end_before_events=0.3
    )
    clock = Clock()
    spark = local_session("spark-ckpt-demo", connect=args.connect)
    control = spark_ckpt.install(spark)
    clock.lap("Spark session")
    cap = args.max_changes_per_trigger
    with tempfile.TemporaryDirectory(prefix="spark-ckpt-demo-") as tmp:
        log = Path(tmp) / "changes"
        splits = sorted(rng.sample(range(1, len(records)), 4))
        # Make sure one transaction's END lands in a later file than all of its events.
        ends = [i for i, r in enumerate(records) if r.get("status") == "END"]
        splits.append(ends[len(ends) // 2])
        files = write_log(str(log), records, splits)
        changes = sum(len(t.events) for t in expected)
        print(
            f"\nGenerated {len(expected)} transactions ({changes} change events) in "
            f"{len(files)} files under {log}; maxChangesPerTrigger={cap}."
        )

        print("\n== txn-cdc -> delta-2pc: each batch is one Delta version, published only after")
        print("   Spark's checkpoint for it is durable ==")
        table = Path(tmp) / "lake" / "changes"
        query = (
            spark.readStream.format("txn-cdc")
            .option("connector", "debezium-json")
            .option("maxChangesPerTrigger", str(cap))
            .load(str(log))
            .writeStream.format("delta-2pc")
            .option("path", str(table))
            .option("checkpointLocation", str(Path(tmp) / "ckpt-lake"))
            .trigger(availableNow=True)
            .start()
        )
        if not control.await_termination(query, 600):
            raise SystemExit("the demo query did not finish within 10 minutes")
        clock.lap("txn-cdc -> delta-2pc stream")
        torn = 0
        for version, added in versions_of(spark, table):
            torn += sum(rows != size for _, _, rows, size in added)
            print(f"version {version:>2}: {sum(a[2] for a in added):>3} changes  {describe(added)}")
        total = spark.read.format("delta").load(str(table)).count()
        print(
            f"-> read back with delta-spark: {total}/{changes} changes; "
            f"{torn} transactions visible in part in any version."
        )
        clock.lap("reading every version back")

        print("\n== the same log with the gate off (batches cut exactly at the cap), written")
        print("   with Spark's own Delta sink ==")
        ungated = Path(tmp) / "lake" / "ungated"
        stream_ungated(spark, log, ungated, Path(tmp) / "ckpt-off", cap)
        clock.lap("gate-off stream")
        split_off: set[str] = set()
        versions = versions_of(spark, ungated)
        for version, added in versions:
            split_off |= {txn for txn, _, rows, size in added if rows != size}
            print(f"version {version:>2}: {sum(a[2] for a in added):>3} changes  {describe(added)}")
        print(
            f"-> {len(versions)} versions; {len(split_off)} transactions split across versions "
            f"(shown as id(rows/size)): each was visible half-applied downstream."
        )
        clock.lap("reading every version back")
        mirror_ok = show_mirrors(spark, control, Path(tmp), args.seed)
        clock.lap("mirror mode, streamed and read back")
    spark.stop()
    if torn or total != changes or not mirror_ok:
        print(
            "ERROR: a transaction was visible in part, changes were lost, or a mirror differs "
            "from its source",
            file=sys.stderr,
        )
        sys.exit(1)
    print("\nEvery Delta version held whole transactions, each exactly once, in commit order;")
    print("the mirrors equal their source tables, consistent with each other at every checkpoint.")
    print(clock.summary())


if __name__ == "__main__":
    main()
