"""SIGKILLs during an incremental snapshot of a large table that a workload keeps writing to.

A table of ``rows`` rows is snapshotted with ``snapshot=incremental`` (``chunk_rows`` per
chunk, two read at a time) while a workload thread updates, inserts, deletes and re-keys rows.
The driver (a ``Trigger.availableNow`` query into ``delta-2pc``) is SIGKILLed ``kills`` times,
each time while an executor is reading a chunk (the fault point ``during_chunk_read``), at
chunks spread over the table; a last run goes to the end. Then:

- the change log, applied in order, must equal the table in PostgreSQL (exact, row for row,
  compared in Spark);
- every streamed transaction is whole (as many rows as its ``txn_size``);
- the checkpoint's offsets say what each restart skipped: the chunks emitted before each kill,
  and every chunk read planned; rows read by chunk reads (planned reads, plus the reads the
  killed batches repeat) over the table's rows is ``read_ratio``.

:func:`run_scenario` returns those numbers. The suite runs a small instance
(``tests/integration/test_postgres_incremental_crash.py``), the benchmark a big one
(``bench/pg_incremental_crash.py``, 3,000,000 rows). Run as a module (``python -m
harness.faults.postgres_incremental drive DSN TABLE CHECKPOINT SPILL PLUGIN CHUNK_ROWS``) it is
the driver itself.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from harness.faults import crash

PARALLELISM = 2


def drive(dsn: str, table: str, checkpoint: str, spill: str, plugin: str, chunk_rows: str) -> None:
    """One driver: an availableNow query to the end, unless a fault kills it first."""
    import spark_ckpt

    spark = spark_ckpt.local_session("pg-incremental-crash")
    control = spark_ckpt.install(spark)
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "postgres")
        .option("plugin", plugin)
        .option("dsn", dsn)
        .option("slot", "incremental_crash")
        .option("tables", "public.big")
        .option("snapshot", "incremental")
        .option("snapshotChunkRows", chunk_rows)
        .option("snapshotParallelism", str(PARALLELISM))
        .option("snapshotDir", spill)
        .load()
        .writeStream.format("delta-2pc")
        .option("path", table)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    if not control.await_termination(query, 3600):
        raise SystemExit("the availableNow run did not finish within an hour")
    spark.stop()


class Workload(threading.Thread):
    """Random transactions on ``table`` until stopped: updates, inserts, deletes, key moves.

    ``table`` has columns ``(id, v text, n int)`` and ids 1..``rows``; new ids count up from
    there, so inserts and key moves never collide. With ``synchronous_commit=False`` a commit
    returns (and is visible to other sessions) before the WAL writer has flushed it.
    """

    def __init__(
        self,
        dsn: str,
        rows: int,
        seed: int,
        table: str = "big",
        synchronous_commit: bool = True,
    ) -> None:
        super().__init__(daemon=True)
        self.dsn, self.rows, self.rng = dsn, rows, random.Random(seed)
        self.table = table
        self.synchronous_commit = synchronous_commit
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.transactions = 0

    def run(self) -> None:
        """Write until :attr:`stop_event` is set."""
        import psycopg
        from psycopg import sql

        def statement(text: str) -> sql.Composed:
            return sql.SQL(text).format(sql.Identifier(self.table))

        update = statement("UPDATE {} SET n = n + 1, v = md5(v) WHERE id = %s")
        insert = statement("INSERT INTO {} VALUES (%s, 'new', 0)")
        delete = statement("DELETE FROM {} WHERE id = %s")
        move = statement("UPDATE {} SET id = %s WHERE id = %s")  # to another chunk
        try:
            next_id = self.rows + 1
            with psycopg.connect(self.dsn) as conn:
                if not self.synchronous_commit:
                    conn.execute("SET synchronous_commit = off")
                    conn.commit()
                while not self.stop_event.is_set():
                    with conn.transaction():
                        for _ in range(self.rng.randint(1, 4)):
                            key = self.rng.randint(1, next_id)
                            kind = self.rng.random()
                            if kind < 0.5:
                                conn.execute(update, (key,))
                            elif kind < 0.7:
                                conn.execute(insert, (next_id,))
                                next_id += 1
                            elif kind < 0.85:
                                conn.execute(delete, (key,))
                            else:
                                conn.execute(move, (next_id, key))
                                next_id += 1
                    self.transactions += 1
                    time.sleep(0.01)
        except BaseException as e:  # reported by whoever started it
            self.error = e


def _committed_states(checkpoint: Path) -> list[dict[str, Any]]:
    """Each logged batch's end offset (from the checkpoint's offsets log), by batch id."""
    states = []
    for path in sorted(
        (checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1
    ):
        if not path.name.isdigit():
            continue
        lines = path.read_text().splitlines()
        offset = json.loads(lines[-1])
        states.append({"batch": int(path.name), **offset})
    return states


def _last_committed(checkpoint: Path) -> dict[str, Any] | None:
    commits = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    if not commits:
        return None
    offsets = {s["batch"]: s for s in _committed_states(checkpoint)}
    return offsets.get(max(commits))


def _fold_matches(spark: Any, table: Path, dsn: str) -> tuple[int, int, int]:
    """(rows in PostgreSQL, rows folded from the change log, rows that differ either way)."""
    import psycopg
    import pyarrow as pa
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    log = spark.read.format("delta").load(str(table))
    key_id = sf.get_json_object("key", "$.id").cast("long")
    before_id = sf.get_json_object("before", "$.id").cast("long")
    upserts = log.where("op in ('r', 'c', 'u')").select(
        key_id.alias("id"), "txn_order", "event_index", sf.lit(1).alias("sub"), "after"
    )
    moved = (
        log.where("op = 'u' and before is not null")
        .where(before_id != key_id)
        .select(
            before_id.alias("id"),
            "txn_order",
            "event_index",
            sf.lit(0).alias("sub"),
            sf.lit(None).cast("string").alias("after"),
        )
    )
    deletes = log.where("op = 'd'").select(
        key_id.alias("id"),
        "txn_order",
        "event_index",
        sf.lit(0).alias("sub"),
        sf.lit(None).cast("string").alias("after"),
    )
    events = upserts.unionByName(moved).unionByName(deletes)
    latest = Window.partitionBy("id").orderBy(
        sf.desc("txn_order"), sf.desc("event_index"), sf.desc("sub")
    )
    folded = (
        events.withColumn("rank", sf.row_number().over(latest))
        .where("rank = 1 and after is not null")
        .select(
            "id",
            sf.get_json_object("after", "$.v").alias("v"),
            sf.get_json_object("after", "$.n").cast("long").alias("n"),
        )
    )
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id, v, n FROM big").fetchall()
    truth = spark.createDataFrame(
        pa.table(
            {"id": [r[0] for r in rows], "v": [r[1] for r in rows], "n": [r[2] for r in rows]}
        ).to_pandas()
    ).select(sf.col("id").cast("long"), "v", sf.col("n").cast("long"))
    differ = folded.exceptAll(truth).count() + truth.exceptAll(folded).count()
    return len(rows), folded.count(), differ


def run_scenario(
    spark: Any,
    dsn: str,
    workdir: Path,
    plugin: str = "pgoutput",
    rows: int = 60_000,
    chunk_rows: int = 3_000,
    kills: int = 3,
) -> dict[str, Any]:
    """Load, snapshot with ``kills`` SIGKILLs under a workload, finish, verify; return numbers."""
    import psycopg

    started = time.monotonic()
    table, checkpoint, spill = workdir / "table", workdir / "ckpt", workdir / "spill"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id bigint PRIMARY KEY, v text, n int)")
        conn.execute(
            "INSERT INTO big SELECT g, md5(g::text), 0 FROM generate_series(1, %s) g", (rows,)
        )
        conn.execute("VACUUM ANALYZE big")
    chunks = -(-rows // chunk_rows)
    workload = Workload(dsn, rows, seed=11)
    workload.start()
    args = [
        "-m",
        "harness.faults.postgres_incremental",
        "drive",
        dsn,
        str(table),
        str(checkpoint),
        str(spill),
        plugin,
        str(chunk_rows),
    ]
    at_kills = []
    try:
        for k in range(kills):
            # Spread over the table: chunk indexes 1/(kills+1), 2/(kills+1), ... of the way.
            target = max(1, (k + 1) * chunks // (kills + 1))
            status = crash.run_killable(args, f"during_chunk_read:{target}")
            if status != -9:
                raise RuntimeError(f"the driver was not killed at chunk {target} (status {status})")
            last = _last_committed(checkpoint)
            done = 0 if last is None or "snapshot" not in last else last["snapshot"]["chunksDone"]
            at_kills.append({"killed_reading_chunk": target, "chunks_done": done})
    finally:
        workload.stop_event.set()
        workload.join(60)
    if workload.error is not None:
        raise workload.error
    crash.run_killable(args, None)
    states = _committed_states(checkpoint)
    planned_reads = {
        (c["table"], c["index"], c["readIn"])
        for s in states
        for c in (s.get("snapshot") or {}).get("pending", [])
        if c["readIn"] == s["checkpoint"]
    }
    repeated = kills * PARALLELISM  # a killed batch is run again, its chunk reads with it
    read_ratio = (len(planned_reads) + repeated) * chunk_rows / rows
    pg_rows, folded_rows, differ = _fold_matches(spark, table, dsn)
    log = spark.read.format("delta").load(str(table)).where("op <> 'r'")
    broken = log.groupBy("txn_id", "txn_size").count().where("count <> txn_size").count()
    return {
        "plugin": plugin,
        "rows": rows,
        "chunk_rows": chunk_rows,
        "chunks": chunks,
        "sigkills": kills,
        "at_kills": at_kills,
        "chunk_reads": len(planned_reads) + repeated,
        "read_ratio": round(read_ratio, 2),
        "workload_transactions": workload.transactions,
        "pg_rows": pg_rows,
        "folded_rows": folded_rows,
        "differing_rows": differ,
        "broken_transactions": broken,
        "seconds": round(time.monotonic() - started),
    }


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "drive":
        drive(*sys.argv[2:])
    else:
        raise SystemExit(
            "usage: python -m harness.faults.postgres_incremental drive DSN TABLE CHECKPOINT SPILL"
            " PLUGIN CHUNK_ROWS"
        )
