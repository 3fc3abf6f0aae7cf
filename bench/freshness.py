"""Freshness: from a source transaction's commit to its row visible in the Delta table.

What an operator of a CDC pipeline is paged on. A writer commits one-row transactions at a fixed
rate and notes each one's commit time (the wall clock right after COMMIT, or the broker's
acknowledgement, returned); a poller reads the table's ``_delta_log`` every 50 ms, and for each
new version only the rows of the files it adds, and notes when each row first became visible.
Commit -> visible is the difference (one machine, one clock). Rows committed in the first
``--warmup`` seconds of a run do not count (the query's start, the first batches' cold workers).

Systems (``--systems``), each a streaming query with Spark's default trigger (as fast as it can):

- ``postgres``: ``txn-cdc`` (``connector=postgres``, ``plugin=--plugin``, ``snapshot=never``) on
  a throwaway PostgreSQL server (:class:`harness.servers.postgres.PgCluster`) into ``delta-2pc``;
- ``debezium``: ``txn-cdc`` (``connector=debezium-json``) on a directory every transaction is
  appended to as one file (BEGIN, its change, END; renamed into place whole) into ``delta-2pc``;
- ``kafka``: ``txn-cdc`` (``connector=kafka``) on topics in Debezium's format on a real KRaft broker
  (:class:`harness.servers.kafka.KafkaBroker`; the change topic with three partitions, the
  transaction topic with one) into ``delta-2pc``;
- ``spark-kafka``: what a user would otherwise run on the same topics: Spark's own Kafka source
  (``spark-sql-kafka-0-10``) with ``foreachBatch`` and a delta-spark ``MERGE`` on the key.

Each (system, rate) runs ``--runs`` times (the systems of one rate alternate, so each sees the
machine's load alike); one JSON line per (system, rate) gives the medians over runs of each run's
p50/p90/p99/max, and where a cycle's time went: the medians over every batch with rows of the
progress events' ``durationMs`` parts (``latestOffset``: planning in the source, the slot peek
for PostgreSQL; ``queryPlanning``; ``addBatch``: the tasks and the sink's pre-commit;
``walCommit`` and ``commitOffsets``: Spark's offset and commit logs; ``triggerExecution``: the
whole cycle) and, for ``delta-2pc``, ``publish_ms`` (from the batch's end to its version, the
history's ``publish_latency``). Per-run lines go to stderr.

Run: ``scripts/bench.sh freshness`` (or ``.venv/bin/python bench/freshness.py --systems postgres
--rates 20,100 --runs 3``). ``--source-option k=v`` adds a ``txn-cdc`` option to every ``txn-cdc``
query, ``--trigger`` sets a ``processingTime`` trigger on every query (defaults unchanged).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

import spark_ckpt
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog

PARTS = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")
POLL_S = 0.05  # the reader's look at the table, as the poller
KAFKA_PARTITIONS = 3
TABLE = "public.orders"


class Poller(threading.Thread):
    """Notes when each row id first shows in a Delta table, reading only what each version adds.

    Runs in the bench's process, every :data:`POLL_S`; a new version is a new
    ``_delta_log/<v>.json`` (written whole by a rename or a conditional put, never in part).
    """

    def __init__(self, table: Path, ids_of: Callable[[Path], list[int]]) -> None:
        super().__init__(daemon=True)
        self.table, self.ids_of = table, ids_of
        self.seen: dict[int, float] = {}
        self.version_of: dict[int, int] = {}  # the version that made each id visible
        self.added_rows = 0  # every row of every file added: more than seen means a repeat
        self.error: BaseException | None = None
        self._halt = threading.Event()
        self._version = 0

    def run(self) -> None:
        """Look at the table every :data:`POLL_S` until stopped (poller thread)."""
        try:
            while not self._halt.wait(POLL_S):
                self._catch_up()
        except BaseException as e:  # reported by the run, which then fails
            self.error = e

    def _catch_up(self) -> None:
        while True:
            commit = self.table / "_delta_log" / f"{self._version:020d}.json"
            try:
                lines = commit.read_text(encoding="utf-8").splitlines()
            except FileNotFoundError:
                return
            now = time.time()
            for line in lines:
                add = json.loads(line).get("add")
                if add is None or not add.get("dataChange", True):
                    continue
                for row_id in self.ids_of(self.table / unquote(add["path"])):
                    self.added_rows += 1
                    if row_id not in self.seen:
                        self.seen[row_id] = now
                        self.version_of[row_id] = self._version
            self._version += 1

    def stop(self) -> None:
        """Stop looking (the bench's main thread, once per run)."""
        self._halt.set()
        self.join(10)


def txn_cdc_ids(path: Path) -> list[int]:
    """Row ids of a ``delta-2pc`` data file: each change row's ``after`` has the ``id``."""
    images = pq.read_table(path, columns=["after"]).column("after").to_pylist()
    return [int(json.loads(image)["id"]) for image in images]


def merged_ids(path: Path) -> list[int]:
    """Row ids of a data file of the ``spark-kafka`` MERGE target."""
    return [int(i) for i in pq.read_table(path, columns=["id"]).column("id").to_pylist()]


def paced(rate: float, seconds: float, first_id: int) -> Iterator[int]:
    """Ids to commit, each yielded at its slot of a fixed-rate schedule (writer thread)."""
    began = time.monotonic()
    for n in range(int(rate * seconds)):
        delay = began + n / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield first_id + n


# -- the systems: each starts its query and returns (query, writer, ids_of) ------------------


class Source:
    """One system's fresh source, query and writer for a run (driver, once per run)."""

    ids_of: Callable[[Path], list[int]] = staticmethod(txn_cdc_ids)

    def __init__(self, spark: Any, args: argparse.Namespace, work: Path, run: str) -> None:
        self.spark, self.args, self.work, self.run = spark, args, work, run

    def reader(self) -> Any:
        """A ``txn-cdc`` reader with ``--source-option``s."""
        reader = self.spark.readStream.format("txn-cdc")
        for option in self.args.source_option:
            key, _, value = option.partition("=")
            reader = reader.option(key, value)
        return reader

    def sink(self, frame: Any) -> Any:
        """Start ``frame`` into ``delta-2pc`` in this run's directory."""
        writer = frame.writeStream.format("delta-2pc").option("path", str(self.work / "table"))
        writer = writer.option("checkpointLocation", str(self.work / "ckpt"))
        if self.args.trigger:
            writer = writer.trigger(processingTime=self.args.trigger)
        return writer.start()

    def ready(self) -> None:
        """Wait until what is committed from now on will be read (bounded)."""

    def commit(self, row_id: int) -> None:
        """Commit one transaction of one row ``row_id`` (writer, at the rate)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the run holds (after the query stopped)."""


class Postgres(Source):
    """``connector=postgres`` on a slot of its own; a row is an autocommitted ``INSERT``."""

    def __init__(self, spark: Any, args: argparse.Namespace, work: Path, run: str) -> None:
        import psycopg

        super().__init__(spark, args, work, run)
        self.dsn: str = args.cluster.dsn()
        self.slot = f"fresh_{run}"
        self.conn = psycopg.connect(self.dsn, autocommit=True)
        reader = self.reader().option("connector", "postgres").option("plugin", args.plugin)
        reader = reader.option("dsn", self.dsn).option("slot", self.slot)
        reader = reader.option("tables", TABLE).option("snapshot", "never")
        self.query = self.sink(reader.load())

    def ready(self) -> None:
        """Wait until the slot exists: what is committed from then on is read (bounded)."""
        deadline = time.monotonic() + 120
        while not self.conn.execute(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)
        ).fetchone():
            if time.monotonic() > deadline or not self.query.isActive:
                raise SystemExit(
                    f"slot {self.slot} not created within 120 s: {self.query.exception()}"
                )
            time.sleep(0.1)

    def commit(self, row_id: int) -> None:
        """Commit one transaction of one row ``row_id`` (writer, at the rate)."""
        self.conn.execute("INSERT INTO orders VALUES (%s, %s)", (row_id, f"{row_id}.00"))

    def close(self) -> None:
        """Drop the run's slot (it would hold WAL) and close the writer's connection."""
        with contextlib.suppress(Exception):
            self.conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
        self.conn.close()


class FileLog(Source):
    """``connector=debezium-json``; a transaction is a file of BEGIN, its change and END."""

    def __init__(self, spark: Any, args: argparse.Namespace, work: Path, run: str) -> None:
        super().__init__(spark, args, work, run)
        self.log = work / "log"
        self.log.mkdir(parents=True)
        self.files = 0
        reader = self.reader().option("connector", "debezium-json")
        self.query = self.sink(reader.load(str(self.log)))

    def commit(self, row_id: int) -> None:
        """Commit one transaction of one row ``row_id`` (writer, at the rate)."""
        txn, ts = f"tx-{row_id}", int(time.time() * 1000)
        source = {"name": "fresh", "schema": "public", "table": "orders", "ts_ms": ts}
        change = {
            "op": "c",
            "before": None,
            "after": {"id": row_id, "total": f"{row_id}.00"},
            "source": source,
            "ts_ms": ts,
            "key": {"id": row_id},
            "transaction": {"id": txn, "total_order": 1, "data_collection_order": 1},
        }
        end = {
            "status": "END",
            "id": txn,
            "event_count": 1,
            "data_collections": [{"data_collection": TABLE, "event_count": 1}],
            "ts_ms": ts,
        }
        records = [{"status": "BEGIN", "id": txn, "ts_ms": ts}, change, end]
        text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        # Whole or not at all: hidden while written (the connector skips dot files), then renamed.
        hidden = self.log / f".{self.files:08d}.jsonl"
        hidden.write_text(text, encoding="utf-8")
        os.replace(hidden, self.log / f"{self.files:08d}.jsonl")
        self.files += 1


class Kafka(Source):
    """``connector=kafka`` on topics of their own; committed once the broker acknowledged."""

    def __init__(self, spark: Any, args: argparse.Namespace, work: Path, run: str) -> None:
        from confluent_kafka import Producer

        super().__init__(spark, args, work, run)
        self.prefix = f"fresh{run}"
        broker = args.broker
        broker.create_topic(f"{self.prefix}.transaction", partitions=1)
        broker.create_topic(f"{self.prefix}.{TABLE}", partitions=KAFKA_PARTITIONS)
        self.producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        self.query = self.start(broker.bootstrap)

    def start(self, bootstrap: str) -> Any:
        """Start the query on this run's topics."""
        reader = self.reader().option("connector", "kafka")
        reader = reader.option("kafka.bootstrap.servers", bootstrap)
        return self.sink(reader.option("subscribePattern", f"{self.prefix}[.].*").load())

    def commit(self, row_id: int) -> None:
        """Commit one transaction of one row ``row_id`` (writer, at the rate)."""
        from harness.workloads.kafka_records import debezium_transaction

        records = debezium_transaction(
            self.prefix, row_id, row_id * 100, [row_id], KAFKA_PARTITIONS
        )
        for topic, partition, key, value in records:
            self.producer.produce(topic, value=value, key=key, partition=partition)
        if self.producer.flush(30):
            raise SystemExit("the broker did not acknowledge a transaction's records within 30 s")


class SparkKafka(Kafka):
    """Spark's Kafka source, ``foreachBatch`` + delta-spark ``MERGE`` on the key."""

    ids_of = staticmethod(merged_ids)

    def start(self, bootstrap: str) -> Any:
        """Create the target table and start the query on this run's change topic."""
        from delta.tables import DeltaTable
        from pyspark.sql import functions as sf

        table = str(self.work / "table")
        self.spark.createDataFrame([], "id long, total string").write.format("delta").save(table)
        frame = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", f"{self.prefix}.{TABLE}")
            .option("startingOffsets", "earliest")
            .load()
            .select(
                sf.from_json(sf.col("value").cast("string"), "payload struct<after: string>").alias(
                    "v"
                )
            )
            .select(sf.from_json("v.payload.after", "id long, total string").alias("a"))
            .select("a.*")
        )

        def merge(batch: Any, batch_id: int) -> None:
            (
                DeltaTable.forPath(self.spark, table)
                .alias("t")
                .merge(batch.alias("s"), "t.id = s.id")
                .whenMatchedUpdateAll()
                .whenNotMatchedInsertAll()
                .execute()
            )

        writer = frame.writeStream.foreachBatch(merge)
        writer = writer.option("checkpointLocation", str(self.work / "ckpt"))
        if self.args.trigger:
            writer = writer.trigger(processingTime=self.args.trigger)
        return writer.start()


SYSTEMS: dict[str, type[Source]] = {
    "postgres": Postgres,
    "debezium": FileLog,
    "kafka": Kafka,
    "spark-kafka": SparkKafka,
}


# -- one run ---------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of ``values``."""
    ranked = sorted(values)
    return ranked[max(0, min(len(ranked) - 1, round(q / 100 * len(ranked) + 0.5) - 1))]


def run_once(
    spark: Any, args: argparse.Namespace, system: str, rate: float, work: Path, run: str, first: int
) -> dict[str, Any]:
    """One query of ``system`` fed at ``rate`` for warm-up plus ``--seconds``; its figures."""
    cls = SYSTEMS[system]
    source = cls(spark, args, work, run)
    query = source.query
    poller = Poller(work / "table", cls.ids_of)
    committed: dict[int, float] = {}
    try:
        source.ready()
        poller.start()
        began = time.time()
        for row_id in paced(rate, args.warmup + args.seconds, first):
            source.commit(row_id)
            committed[row_id] = time.time()
            if row_id % 50 == 0 and not query.isActive:
                raise SystemExit(f"{system} run {run}: the query ended: {query.exception()}")
        deadline = time.monotonic() + 120
        while len(poller.seen) < len(committed):
            if poller.error is not None:
                raise SystemExit(f"{system} run {run}: the poller failed: {poller.error!r}")
            if time.monotonic() > deadline or not query.isActive:
                raise SystemExit(
                    f"{system} run {run}: {len(committed) - len(poller.seen)} of {len(committed)} "
                    f"rows not visible 120 s after the last commit ({query.exception()})"
                )
            time.sleep(POLL_S)
        progress = [json.loads(p.json) for p in query.recentProgress]
    finally:
        poller.stop()
        with contextlib.suppress(Exception):
            query.stop()
        source.close()
    if set(poller.seen) != set(committed):
        raise SystemExit(f"{system} run {run}: rows seen that were never committed")
    if system != "spark-kafka":
        # What delta-2pc promises: each transaction once, in commit order (ids grow with it).
        if poller.added_rows != len(committed):
            raise SystemExit(f"{system} run {run}: {poller.added_rows} rows for {len(committed)}")
        # No transaction visible before one committed earlier (a version's files are unordered).
        versions = [poller.version_of[i] for i in sorted(committed)]
        if versions != sorted(versions):
            raise SystemExit(f"{system} run {run}: rows became visible out of commit order")
    since = began + args.warmup
    lags = [poller.seen[i] - t for i, t in committed.items() if t >= since]
    batches = [p for p in progress if p["numInputRows"] and dt_seconds(p["timestamp"]) >= since]
    if not batches:  # one batch took the whole run (a cold start): count it, not nothing
        batches = [p for p in progress if p["numInputRows"]]
    parts = {
        part: statistics.median(int(p["durationMs"].get(part, 0)) for p in batches)
        for part in (*PARTS, "triggerExecution")
    }
    result: dict[str, Any] = {
        "system": system,
        "rate": rate,
        "run": run,
        "rows": len(lags),
        "p50_ms": round(percentile(lags, 50) * 1000),
        "p90_ms": round(percentile(lags, 90) * 1000),
        "p99_ms": round(percentile(lags, 99) * 1000),
        "max_ms": round(max(lags) * 1000),
        "batches_per_s": round(len(batches) / args.seconds, 2),
        "rows_per_batch": statistics.median(int(p["numInputRows"]) for p in batches),
        "parts_ms": parts,
    }
    if system != "spark-kafka":
        published = [
            r.publish_latency
            for r in HistoryLog(SparkCheckpoint(str(work / "ckpt"))).records()
            if r.rows and r.publish_latency is not None and (r.ended_at or 0) >= since
        ]
        result["publish_ms"] = round(statistics.median(published) * 1000) if published else None
    return result


def dt_seconds(iso: str) -> float:
    """A progress event's ``timestamp`` as seconds since the epoch."""
    import datetime as dt

    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def summary(
    system: str, rate: float, runs: list[dict[str, Any]], args: argparse.Namespace
) -> dict[str, Any]:
    """The JSON line of one (system, rate): medians over its runs."""

    def med(key: str) -> Any:
        values = [r[key] for r in runs if r.get(key) is not None]
        return round(statistics.median(values)) if values else None

    line: dict[str, Any] = {
        "bench": "freshness",
        "system": system,
        "rate_tx_per_s": rate,
        "runs": len(runs),
        "seconds_per_run": args.seconds,
        **{key: med(key) for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms")},
        "per_run_p99_ms": [r["p99_ms"] for r in runs],
        "batches_per_s": statistics.median(r["batches_per_s"] for r in runs),
        "rows_per_batch": statistics.median(r["rows_per_batch"] for r in runs),
        "cycle_parts_ms": {
            part: round(statistics.median(r["parts_ms"][part] for r in runs))
            for part in (*PARTS, "triggerExecution")
        },
    }
    if system == "postgres":
        line["plugin"] = args.plugin
    if system != "spark-kafka":
        line["publish_ms"] = med("publish_ms")
    if args.source_option:
        line["source_options"] = args.source_option
    if args.trigger:
        line["trigger"] = args.trigger
    if args.label:
        line["label"] = args.label
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="postgres,debezium,kafka,spark-kafka")
    parser.add_argument(
        "--rates", default="20,100", help="transactions per second, comma-separated"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds per run not counted")
    parser.add_argument("--plugin", default="pgoutput")
    parser.add_argument("--trigger", default="", help="a processingTime trigger for every query")
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--label", default="", help="a note copied into the JSON lines")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[,KEY=VALUE]",
        help="also run every system so, alternating with the defaults in the same session: "
        "spark.* keys are session settings (set for the run, unset after), trigger= a "
        "processingTime trigger, other keys txn-cdc source options",
    )
    args = parser.parse_args()
    variants: dict[str, list[str]] = {"default": []}
    for text in args.variant:
        name, _, settings = text.partition(":")
        variants[name] = [s for s in settings.split(",") if s]
    systems = args.systems.split(",")
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems {sorted(unknown)}; known: {sorted(SYSTEMS)}")
    rates = [float(r) for r in args.rates.split(",")]

    with contextlib.ExitStack() as stack:
        scratch = Path(
            stack.enter_context(
                tempfile.TemporaryDirectory(prefix="freshness-", ignore_cleanup_errors=True)
            )
        )
        packages = []
        if "postgres" in systems:
            import psycopg

            from harness.servers.postgres import PgCluster

            # A directory of its own: the server may run as the postgres user.
            args.cluster = PgCluster(tempfile.mkdtemp(prefix="freshness-pg-")).start()
            stack.callback(shutil.rmtree, args.cluster.workdir, ignore_errors=True)
            stack.callback(args.cluster.stop)
            with psycopg.connect(args.cluster.dsn(), autocommit=True) as conn:
                conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, total numeric)")
        if {"kafka", "spark-kafka"} & set(systems):
            from harness.servers.kafka import KafkaBroker, spark_kafka_package

            args.broker = KafkaBroker(scratch / "broker", heap="512m")
            args.broker.start()
            stack.callback(args.broker.stop)
            packages.append(spark_kafka_package())
        spark = spark_ckpt.local_session("bench-freshness", packages=packages)
        spark_ckpt.install(spark)
        spark.sparkContext.setLogLevel("ERROR")
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "5000")
        first = 1
        number = 0

        base_options, base_trigger = list(args.source_option), args.trigger

        def one(system: str, rate: float, variant: str, warmup: bool = False) -> dict[str, Any]:
            nonlocal first, number
            number += 1
            work = scratch / f"{system}-{number}"
            settings = [s.partition("=")[::2] for s in variants[variant]]
            args.source_option = base_options + [
                f"{k}={v}" for k, v in settings if not k.startswith("spark.") and k != "trigger"
            ]
            args.trigger = next((v for k, v in settings if k == "trigger"), base_trigger)
            confs = [(k, v) for k, v in settings if k.startswith("spark.")]
            for key, value in confs:
                spark.conf.set(key, value)
            try:
                result = run_once(spark, args, system, rate, work, str(number), first)
            finally:
                for key, _ in confs:
                    spark.conf.unset(key)
            first += int(rate * (args.warmup + args.seconds)) + 1
            result["warm_up"] = warmup
            result["variant"] = variant
            print(json.dumps(result), file=sys.stderr, flush=True)
            return result

        # One short unmeasured run per system: the session's first queries run on cold code.
        measured_seconds = args.seconds
        args.seconds = 4.0
        for system in systems:
            one(system, rates[0], "default", warmup=True)
        args.seconds = measured_seconds
        results: dict[tuple[str, float, str], list[dict[str, Any]]] = {}
        entries = [(system, variant) for system in systems for variant in variants]
        for rate in rates:
            for index in range(args.runs):
                # Systems and variants alternate, each run in another order: alike in the load.
                shift = index % len(entries)
                for system, variant in entries[shift:] + entries[:shift]:
                    results.setdefault((system, rate, variant), []).append(
                        one(system, rate, variant)
                    )
        spark.stop()
    args.source_option, args.trigger = base_options, base_trigger
    for (system, rate, variant), runs in results.items():
        line = summary(system, rate, runs, args)
        if len(variants) > 1:
            line["variant"] = variant
            line["variant_settings"] = variants[variant]
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
