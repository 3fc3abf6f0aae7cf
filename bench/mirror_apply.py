"""Seconds per batch of mirror mode (merge-on-read, copy-on-write) vs foreachBatch + MERGE.

One table (``public.items``) is loaded with ``--rows`` rows, then changed by batches of
``--batch`` changes (updates of random existing keys, some inserts and deletes). Every pipeline
reads the same Debezium log through ``txn-cdc`` with the same batch cap:

- **mirror_dv**: ``delta-2pc`` ``mode=mirror`` as it is by default: the table has deletion vectors
  and each batch marks the rows it replaces (merge-on-read), found by the write tasks on the
  executors once the table has ``executorMarksMinFiles`` (1,000) files;
- **mirror_dv_tasks**, **mirror_dv_driver**: the same with the rows found by the write tasks
  whatever the table's size (``executorMarksMinFiles=0``), or by the publisher on the driver
  (past any table's file count), to compare the two side by side;
- **mirror_cow**: the same with ``deletionVectors=false``: each file holding a changed key is
  rewritten (copy-on-write);
- **merge_dv**: what users write today: ``foreachBatch`` that keeps each key's last change of
  the batch (a window over ``txn_order``, ``event_index``), parses ``after`` with ``from_json``
  and runs delta-spark's ``MERGE`` (delete / update / insert) into a table with
  ``delta.enableDeletionVectors``, idempotent through ``spark.databricks.delta.write.txnAppId``
  / ``txnVersion``.

The load runs first, untimed: the first 1,000 rows through the pipeline (which creates its table
as a user's does), the rest appended by Spark in files of 10,000 rows; then the change batches
run, timed, to the last batch published.
``--hot-keys N`` sends 90% of the updates to the newest N keys (OLTP rows change while they are
recent); by default keys are uniformly random, so every batch touches every file of the table.
Each size of ``--sizes`` is measured ``--pairs`` times; every pipeline's seconds per batch (the
timed run over its batches) is the median over them. Prints one JSON line per size and
pipeline, then a summary line. Run: ``.venv/bin/python bench/mirror_apply.py [--sizes
200000,2000000] [--batch 2000]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import spark_ckpt
from spark_ckpt.testing.debezium_log import write_log

TABLE = "public.items"
SCHEMA = "id long, amount string, sku string, note string"


def _event(
    op: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    txn: str,
    index: int,
    total: int,
) -> dict[str, Any]:
    image = after if after is not None else before
    assert image is not None
    return {
        "op": op,
        "before": before,
        "after": after,
        "key": {"id": image["id"]},
        "source": {"name": "bench", "schema": "public", "table": "items", "ts_ms": 1},
        "ts_ms": 1,
        "transaction": {"id": txn, "total_order": index + 1, "data_collection_order": index + 1},
    }


def _transaction(txn: str, changes: list[tuple[str, Any, Any]]) -> list[dict[str, Any]]:
    events = [_event(op, b, a, txn, i, len(changes)) for i, (op, b, a) in enumerate(changes)]
    return [
        {"status": "BEGIN", "id": txn, "ts_ms": 1},
        *events,
        {
            "status": "END",
            "id": txn,
            "event_count": len(events),
            "data_collections": [{"data_collection": TABLE, "event_count": len(events)}],
            "ts_ms": 1,
        },
    ]


LOADED_BY_PIPELINE = 1_000
"""The rows each pipeline's load log inserts through it (its table is created as a user's is);
the rest of ``--rows`` are appended by Spark (:func:`bulk_load`), in the files of 10,000 rows a
load batch of 10,000 inserts writes: 20M rows through the pipelines took hours."""


def initial_row(key: int, seed: int) -> dict[str, Any]:
    """Row ``key`` of the loaded table: a function of the key, as :func:`bulk_load` computes it.

    Integer arithmetic only, so that Python here and Spark SQL there give the same text.
    """
    cents = (key * 7919 + seed * 104729) % 99999 + 1
    return {
        "id": key,
        "amount": f"{cents // 100}.{cents % 100:02d}",
        "sku": f"sku-{(key * 31 + seed) % 500 + 1}",
        "note": "x" * ((key * 17 + seed) % 41),
    }


def bulk_load(spark: Any, table: Path, first: int, rows: int, seed: int) -> None:
    """Append rows ``first`` to ``rows - 1`` (:func:`initial_row`) to the Delta table (driver).

    One file per 10,000 consecutive keys, with delta-spark's statistics, as the load through a
    pipeline at a cap of 10,000 changes writes them.
    """
    if rows <= first:
        return
    from pyspark.sql import functions as sf

    columns = {
        "id": "id",
        "amount": "concat(cast(cents div 100 AS string), '.', "
        "lpad(cast(cents % 100 AS string), 2, '0'))",
        "sku": f"concat('sku-', cast((id * 31 + {seed}) % 500 + 1 AS string))",
        "note": f"repeat('x', cast((id * 17 + {seed}) % 41 AS int))",
    }
    schema = spark.read.format("delta").load(str(table)).schema
    if sorted(schema.fieldNames()) != sorted(columns):
        raise SystemExit(f"{table} has columns {schema.fieldNames()}, not {sorted(columns)}")
    files = -(-(rows - first) // 10_000)
    frame = spark.range(first, rows, numPartitions=files).selectExpr(
        "id", f"(id * 7919 + {seed * 104729}) % 99999 + 1 AS cents"
    )
    (
        frame.selectExpr(*(f"{columns[f.name]} AS {f.name}" for f in schema.fields))
        .select(*(sf.col(f.name).cast(f.dataType) for f in schema.fields))
        .write.format("delta")
        .mode("append")
        .option("maxRecordsPerFile", 10_000)
        .save(str(table))
    )
    probes = sorted({first, (first + rows) // 2, rows - 1})
    stored = spark.read.format("delta").load(str(table)).where(sf.col("id").isin(probes))
    if sorted((row.asDict() for row in stored.collect()), key=lambda r: r["id"]) != [
        initial_row(key, seed) for key in probes
    ]:
        raise SystemExit(f"Spark's rows of {table} differ from initial_row's")


def make_logs(
    load_dir: Path,
    change_dir: Path,
    rows: int,
    batches: int,
    batch: int,
    seed: int,
    hot_keys: int = 0,
) -> None:
    """The load log (the first :data:`LOADED_BY_PIPELINE` rows) and the change log.

    The change log is ``batches`` x ``batch`` changes on the table of ``rows`` rows. Only the
    rows it changes are held here; the others are :func:`initial_row`.
    """
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    for start in range(0, min(rows, LOADED_BY_PIPELINE), 1000):
        end = min(rows, LOADED_BY_PIPELINE, start + 1000)
        changes = [("c", None, initial_row(key, seed)) for key in range(start, end)]
        records += _transaction(f"load-{start}", changes)
    write_log(str(load_dir), records, [])
    records = []
    changed: dict[int, dict[str, Any] | None] = {}  # a changed key's row; None: deleted

    def current(key: int) -> dict[str, Any] | None:
        if key in changed:
            return changed[key]
        return initial_row(key, seed) if key < rows else None

    next_key = rows
    for number in range(batches * batch // 10):  # transactions of 10 changes
        changes = []
        for _ in range(10):
            roll = rng.random()
            if roll < 0.1:
                changed[next_key] = {"id": next_key, "amount": "1.00", "sku": "new", "note": ""}
                changes.append(("c", None, dict(changed[next_key])))
                next_key += 1
            elif roll < 0.15:
                key = rng.randrange(next_key)
                while (row := current(key)) is None:  # a uniformly random live key
                    key = rng.randrange(next_key)
                changes.append(("d", row, None))
                changed[key] = None
            else:
                if hot_keys and rng.random() < 0.9:
                    key = next_key - 1 - rng.randrange(min(hot_keys, next_key))  # recent rows
                else:
                    key = rng.randrange(next_key)
                old = current(key)
                if old is not None:
                    changed[key] = {**old, "amount": f"{rng.randint(1, 99999) / 100:.2f}"}
                    changes.append(("u", old, dict(changed[key])))
        records += _transaction(f"chg-{number}", changes)
    write_log(str(change_dir), records, [])


def _source(spark: Any, log: Path, cap: int) -> Any:
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", str(cap))
        .load(str(log))
    )


def run_mirror(
    spark: Any,
    control: spark_ckpt.Control,
    log: Path,
    work: Path,
    cap: int,
    name: str = "mirror_dv",
) -> None:
    """One availableNow run of mirror mode over ``log`` (driver), to everything published."""
    query = (
        _source(spark, log, cap)
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("deletionVectors", str(name != "mirror_cow").lower())
        .options(**_MARKS.get(name, {}))
        .option("path", str(work / name))
        .option("checkpointLocation", str(work / f"{name}-ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    if not control.await_termination(query, 3600):
        raise SystemExit("the mirror run did not finish within an hour")


def run_merge(spark: Any, log: Path, work: Path, cap: int) -> None:
    """One availableNow run of foreachBatch + delta-spark MERGE over ``log`` (driver)."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    target = str(work / "merge_dv")
    app = "bench-merge"
    if not DeltaTable.isDeltaTable(spark, target):
        spark.sql(
            f"CREATE TABLE delta.`{target}` (id long, amount string, sku string, note string) "
            "USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
        )

    def upsert(frame: Any, batch_id: int) -> None:
        order = Window.partitionBy("k").orderBy(sf.desc("txn_order"), sf.desc("event_index"))
        latest = (
            frame.where(sf.col("table") == TABLE)
            .withColumn("k", sf.get_json_object("key", "$.id").cast("long"))
            .withColumn("rn", sf.row_number().over(order))
            .where("rn = 1")
            .withColumn("a", sf.from_json("after", SCHEMA))
            .select("k", "op", "a.*")
        )
        spark.conf.set("spark.databricks.delta.write.txnAppId", app)
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            columns = {c: f"s.{c}" for c in ("id", "amount", "sku", "note")}
            (
                DeltaTable.forPath(spark, target)
                .alias("t")
                .merge(latest.alias("s"), "t.id = s.k")
                .whenMatchedDelete("s.op = 'd'")
                .whenMatchedUpdate(set=columns)
                .whenNotMatchedInsert(condition="s.op != 'd'", values=columns)
                .execute()
            )
        finally:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")

    query = (
        _source(spark, log, cap)
        .writeStream.foreachBatch(upsert)
        .option("checkpointLocation", str(work / "merge_dv-ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(3600)


def _copy_files(source: Path, log: Path, first: int) -> None:
    for number, path in enumerate(sorted(source.glob("*.jsonl")), start=first):
        (log / f"{number:08d}.jsonl").write_bytes(path.read_bytes())


PIPELINES = ("mirror_dv", "mirror_dv_tasks", "mirror_dv_driver", "mirror_cow", "merge_dv")
_MARKS = {
    "mirror_dv_tasks": {"executorMarksMinFiles": "0"},
    "mirror_dv_driver": {"executorMarksMinFiles": str(1 << 30)},
}
"""Where the pipelines find the rows a batch replaces, when not where the sink decides."""
DEFAULT_PIPELINES = ("mirror_dv", "mirror_cow", "merge_dv")


def measure(
    spark: Any,
    control: spark_ckpt.Control,
    rows: int,
    batch: int,
    batches: int,
    seed: int,
    hot_keys: int = 0,
    pipelines: tuple[str, ...] = DEFAULT_PIPELINES,
) -> dict[str, float]:
    """Seconds for the change phase of each of ``pipelines``, at one table size.

    Their tables are compared at the end: each must hold the same rows as the first's.
    """
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        make_logs(work / "load", work / "changes", rows, batches, batch, seed, hot_keys)
        # Each run starts with another pipeline: the first query of a session pays the JVM's
        # warm-up (its classes loaded and compiled), 0.3 s a batch at 200k rows here.
        turn = seed % len(pipelines)
        for name in (*pipelines[turn:], *pipelines[:turn]):
            log = work / f"log-{name}"
            log.mkdir()
            _copy_files(work / "load", log, 0)

            def run(path: Path, cap: int, name: str = name) -> None:
                if name == "merge_dv":
                    run_merge(spark, path, work, cap)
                else:
                    run_mirror(spark, control, path, work, cap, name)

            run(log, 10_000)  # the load, untimed: the pipeline creates its table
            table = work / name if name == "merge_dv" else work / name / TABLE
            bulk_load(spark, table, LOADED_BY_PIPELINE, rows, seed)
            _copy_files(work / "changes", log, 1)
            began = time.monotonic()
            run(log, batch)
            out[name] = time.monotonic() - began

        def table_of(name: str) -> Any:
            path = work / name if name == "merge_dv" else work / name / TABLE
            return spark.read.format("delta").load(str(path))

        first = table_of(pipelines[0])
        for name in pipelines[1:]:
            other = table_of(name)
            if other.exceptAll(first).count() or first.exceptAll(other).count():
                raise SystemExit(f"{name} and {pipelines[0]} disagree at {rows} rows")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="200000,2000000", help="table rows, comma-separated")
    parser.add_argument("--batch", type=int, default=2_000, help="changes per batch")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=3, help="runs of every size")
    parser.add_argument(
        "--hot-keys",
        type=int,
        default=0,
        help="send 90%% of updates to the newest N keys (recent rows, as OLTP updates them); "
        "0: uniformly random keys, every file of the table touched by every batch",
    )
    parser.add_argument(
        "--pipelines",
        default=",".join(DEFAULT_PIPELINES),
        help="comma-separated, of " + ", ".join(PIPELINES) + " (mirror_cow rewrites every file "
        "of a table of uniform keys each batch: minutes a batch at 20M rows)",
    )
    parser.add_argument(
        "--driver-memory",
        default="6g",
        help="the session's driver heap, for every pipeline alike (MERGE ran out of a 2g heap "
        "at 2M rows, building a broadcast hash join's relation)",
    )
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    pipelines = tuple(args.pipelines.split(","))
    if not pipelines or set(pipelines) - set(PIPELINES):
        parser.error(f"--pipelines takes names of {', '.join(PIPELINES)}")
    spark = spark_ckpt.local_session(
        "bench-mirror-apply", conf={"spark.driver.memory": args.driver_memory}
    )
    control = spark_ckpt.install(spark)
    samples: dict[str, dict[int, list[float]]] = {name: {} for name in pipelines}
    for pair in range(args.pairs):
        for rows in sizes:
            seconds = measure(
                spark,
                control,
                rows,
                args.batch,
                args.batches,
                seed=pair,
                hot_keys=args.hot_keys,
                pipelines=pipelines,
            )
            for name, value in seconds.items():
                samples[name].setdefault(rows, []).append(value / args.batches)
            print(json.dumps({"pair": pair, "rows": rows, **seconds}), file=sys.stderr, flush=True)
    per_batch = {
        name: {rows: statistics.median(values) for rows, values in by_size.items()}
        for name, by_size in samples.items()
    }
    for rows in sizes:
        for name in pipelines:
            line = {
                "bench": "mirror_apply",
                "pipeline": name,
                "rows": rows,
                "batch_changes": args.batch,
                "batches": args.batches,
                "runs": args.pairs,
                "hot_keys": args.hot_keys,
                "seconds_per_batch": round(per_batch[name][rows], 3),
            }
            print(json.dumps(line), flush=True)
    small, large = sizes[0], sizes[-1]
    summary: dict[str, Any] = {"bench": "mirror_apply", "summary": True, "sizes": sizes}
    for other in ("merge_dv", "mirror_cow", "mirror_dv_driver", "mirror_dv_tasks"):
        if {"mirror_dv", other} <= set(pipelines):
            summary[f"mirror_dv_over_{other}"] = {
                str(rows): round(per_batch[other][rows] / per_batch["mirror_dv"][rows], 2)
                for rows in sizes
            }
    summary["growth_largest_over_smallest"] = {
        name: round(per_batch[name][large] / per_batch[name][small], 2) for name in pipelines
    }
    spark.stop()
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
