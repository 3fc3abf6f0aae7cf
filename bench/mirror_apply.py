"""Changes per second applied by mirror mode vs the usual foreachBatch + delta-spark MERGE.

One table (``public.items``) is loaded with ``--rows`` rows, then changed by batches of
``--batch`` changes (updates of random existing keys, some inserts and deletes). Both pipelines
read the same Debezium log through ``txn-cdc`` with the same batch cap:

- **mirror**: ``delta-2pc`` ``mode=mirror`` (its change log included);
- **merge**: what users write today: ``foreachBatch`` that keeps each key's last change of the
  batch (a window over ``txn_order``, ``event_index``), parses ``after`` with ``from_json`` and
  runs delta-spark's ``MERGE`` (delete / update / insert), idempotent through
  ``spark.databricks.delta.write.txnAppId`` / ``txnVersion``.

The load runs first, untimed; then the change batches run, timed, to the last batch published.
``--hot-keys N`` sends 90% of the updates to the newest N keys (OLTP rows change while they are
recent); by default keys are uniformly random, so every batch touches every file of the table.
Both run at ``--rows`` and at ten times as many, alternating, ``--pairs`` times; the verdict is
the median per-pair ratio of changes per second (mirror over merge), and each pipeline's
seconds per batch at both sizes (a batch's cost should not grow with the table). Prints one
JSON line. Run: ``.venv/bin/python bench/mirror_apply.py [--rows 20000] [--batch 2000]``.
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


def make_logs(
    load_dir: Path,
    change_dir: Path,
    rows: int,
    batches: int,
    batch: int,
    seed: int,
    hot_keys: int = 0,
) -> None:
    """The load log (``rows`` inserts) and the change log (``batches`` x ``batch`` changes)."""
    rng = random.Random(seed)
    state: dict[int, dict[str, Any]] = {}
    records: list[dict[str, Any]] = []
    for start in range(0, rows, 1000):
        changes = []
        for key in range(start, min(rows, start + 1000)):
            state[key] = {
                "id": key,
                "amount": f"{rng.randint(1, 99999) / 100:.2f}",
                "sku": f"sku-{rng.randint(1, 500)}",
                "note": "x" * rng.randint(0, 40),
            }
            changes.append(("c", None, dict(state[key])))
        records += _transaction(f"load-{start}", changes)
    write_log(str(load_dir), records, [])
    records = []
    next_key = rows
    for number in range(batches * batch // 10):  # transactions of 10 changes
        changes = []
        for _ in range(10):
            roll = rng.random()
            if roll < 0.1:
                state[next_key] = {"id": next_key, "amount": "1.00", "sku": "new", "note": ""}
                changes.append(("c", None, dict(state[next_key])))
                next_key += 1
            elif roll < 0.15:
                key = rng.choice(list(state))
                changes.append(("d", state.pop(key), None))
            else:
                if hot_keys and rng.random() < 0.9:
                    key = next_key - 1 - rng.randrange(min(hot_keys, next_key))  # recent rows
                else:
                    key = rng.randrange(next_key)
                if key in state:
                    old = dict(state[key])
                    state[key] = {**old, "amount": f"{rng.randint(1, 99999) / 100:.2f}"}
                    changes.append(("u", old, dict(state[key])))
        records += _transaction(f"chg-{number}", changes)
    write_log(str(change_dir), records, [])


def _source(spark: Any, log: Path, cap: int) -> Any:
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("maxChangesPerTrigger", str(cap))
        .load(str(log))
    )


def run_mirror(spark: Any, control: spark_ckpt.Control, log: Path, work: Path, cap: int) -> None:
    """One availableNow run of mirror mode over ``log`` (driver), to everything published."""
    query = (
        _source(spark, log, cap)
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", str(work / "mirror"))
        .option("checkpointLocation", str(work / "mirror-ckpt"))
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

    target = str(work / "merge")
    app = "bench-merge"

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
            if not DeltaTable.isDeltaTable(spark, target):
                latest.where("op != 'd'").drop("k", "op").write.format("delta").save(target)
                return
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
        .option("checkpointLocation", str(work / "merge-ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(3600)


def _copy_files(source: Path, log: Path, first: int) -> None:
    for number, path in enumerate(sorted(source.glob("*.jsonl")), start=first):
        (log / f"{number:08d}.jsonl").write_bytes(path.read_bytes())


def measure(
    spark: Any,
    control: spark_ckpt.Control,
    rows: int,
    batch: int,
    batches: int,
    seed: int,
    hot_keys: int = 0,
) -> dict[str, float]:
    """Seconds for the change phase of each pipeline, at one table size."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        make_logs(work / "load", work / "changes", rows, batches, batch, seed, hot_keys)
        for name in ("mirror", "merge"):
            log = work / f"log-{name}"
            log.mkdir()
            _copy_files(work / "load", log, 0)

            def run(path: Path, cap: int, name: str = name) -> None:
                if name == "mirror":
                    run_mirror(spark, control, path, work, cap)
                else:
                    run_merge(spark, path, work, cap)

            run(log, 10_000)  # the load, untimed (files of at most 10k rows)
            _copy_files(work / "changes", log, 1)
            began = time.monotonic()
            run(log, batch)
            out[name] = time.monotonic() - began
        mirror = spark.read.format("delta").load(str(work / "mirror" / TABLE))
        merge = spark.read.format("delta").load(str(work / "merge"))
        if mirror.exceptAll(merge).count() or merge.exceptAll(mirror).count():
            raise SystemExit(f"the two pipelines disagree at {rows} rows")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=2_000, help="changes per batch")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--hot-keys",
        type=int,
        default=0,
        help="send 90%% of updates to the newest N keys (recent rows, as OLTP updates them); "
        "0: uniformly random keys, every file of the table touched by every batch",
    )
    args = parser.parse_args()
    spark = spark_ckpt.local_session("bench-mirror-apply")
    control = spark_ckpt.install(spark)
    changes = args.batch * args.batches
    ratios, per_batch = [], {"mirror": {}, "merge": {}}
    samples: dict[str, dict[int, list[float]]] = {"mirror": {}, "merge": {}}
    for pair in range(args.pairs):
        for rows in (args.rows, args.rows * 10):
            seconds = measure(
                spark, control, rows, args.batch, args.batches, seed=pair, hot_keys=args.hot_keys
            )
            for name, value in seconds.items():
                samples[name].setdefault(rows, []).append(value / args.batches)
            if rows == args.rows * 10:
                ratios.append(seconds["merge"] / seconds["mirror"])
            print(json.dumps({"pair": pair, "rows": rows, **seconds}), file=sys.stderr, flush=True)
    for name in samples:
        for rows, values in samples[name].items():
            per_batch[name][str(rows)] = round(statistics.median(values), 3)
    small, large = str(args.rows), str(args.rows * 10)
    result = {
        "bench": "mirror_apply",
        "rows": args.rows,
        "batch_changes": args.batch,
        "batches": args.batches,
        "pairs": args.pairs,
        "hot_keys": args.hot_keys,
        "ratio_over_merge": round(statistics.median(ratios), 2),
        "mirror_changes_per_s": round(
            changes
            / statistics.median([v * args.batches for v in samples["mirror"][args.rows * 10]]),
            1,
        ),
        "merge_changes_per_s": round(
            changes
            / statistics.median([v * args.batches for v in samples["merge"][args.rows * 10]]),
            1,
        ),
        "seconds_per_batch": per_batch,
        "mirror_growth_at_10x": round(per_batch["mirror"][large] / per_batch["mirror"][small], 2),
        "merge_growth_at_10x": round(per_batch["merge"][large] / per_batch["merge"][small], 2),
    }
    spark.stop()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
