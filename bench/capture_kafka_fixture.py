"""Capture what Debezium writes to Kafka through Kafka Connect, as a small test fixture.

A Kafka broker (:mod:`harness.servers.kafka`), a Kafka Connect worker running Debezium's PostgreSQL
connector (:mod:`harness.servers.kafka_connect`; pgoutput, transaction metadata, the JSON converter
with schemas) and a PostgreSQL server: Debezium snapshots two tables, then streams transactions that
touch one or both, including a primary-key change and a delete; Connect is SIGKILLed once (it
repeats what followed its last flushed offset); an ``execute-snapshot`` signal runs an incremental
snapshot in chunks of 2 rows. The items topic has two partitions, so one transaction's events are
spread over three partitions and the transaction topic.

Every record of every topic goes to ``--out`` (default ``tests/fixtures/kafka/postgres-3.6.1``)
as ``<topic>-<partition>.jsonl``, one line per record in offset order:
``{"offset": 12, "key": "<key as written>", "value": "<value as written>"}`` (``null`` for a
tombstone), with a ``STEPS.txt`` of what was done.

Run: ``python bench/capture_kafka_fixture.py`` (needs PostgreSQL and Maven, as the tests do).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import psycopg

from harness.servers.kafka import KafkaBroker
from harness.servers.kafka_connect import KafkaConnect, debezium_postgres
from harness.servers.postgres import PgCluster

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "kafka" / "postgres-3.6.1"
PREFIX = "dbz"
TABLES = ("public.orders", "public.items", "public.debezium_signal")


def _dump(broker: KafkaBroker, out: Path) -> int:
    """Every record of the ``dbz.*`` topics to ``out``; returns how many."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = {
        name: len(meta.partitions)
        for name, meta in admin.list_topics(timeout=30).topics.items()
        if name.startswith(f"{PREFIX}.")
    }
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "fixture-dump",
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
        }
    )
    total = 0
    try:
        for topic, count in sorted(topics.items()):
            for partition in range(count):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=30
                )
                consumer.assign([TopicPartition(topic, partition, low)])
                lines: list[str] = []
                deadline = time.monotonic() + 60
                while len(lines) < high - low and time.monotonic() < deadline:
                    for message in consumer.consume(500, timeout=1.0):
                        if message.error():
                            raise RuntimeError(str(message.error()))
                        key, value = message.key(), message.value()
                        record = {
                            "offset": message.offset(),
                            "key": None if key is None else key.decode(),
                            "value": None if value is None else value.decode(),
                        }
                        lines.append(json.dumps(record))
                (out / f"{topic}-{partition}.jsonl").write_text("\n".join(lines) + "\n")
                total += len(lines)
    finally:
        consumer.close()
    return total


def capture(out: Path) -> None:
    """Run the steps above and write the fixture to ``out``."""
    work = Path(tempfile.mkdtemp(prefix="kafka-fixture-"))
    steps: list[str] = []

    def step(text: str) -> None:
        steps.append(f"{time.strftime('%H:%M:%S')} {text}")
        print(steps[-1], flush=True)

    broker = KafkaBroker(work / "broker")
    connect = KafkaConnect(work / "connect", broker.bootstrap)
    with PgCluster(tempfile.mkdtemp(prefix="kafka-fixture-pg-")) as server:
        dsn = server.dsn()
        try:
            broker.start()
            # The items topic with two partitions; the others get Connect's default (one).
            broker.create_topic(f"{PREFIX}.public.items", partitions=2)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE orders (id int PRIMARY KEY, total numeric(10,2))")
                conn.execute(
                    "CREATE TABLE items (order_id int, n int, sku text, PRIMARY KEY (order_id, n))"
                )
                conn.execute(
                    "CREATE TABLE debezium_signal "
                    "(id varchar(64) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))"
                )
                conn.execute("INSERT INTO orders VALUES (1, 10.00), (2, 20.00), (3, 30.00)")
                conn.execute("INSERT INTO items VALUES (1, 1, 'a'), (1, 2, 'b'), (2, 1, 'c')")
            step("snapshot rows: orders 1,2,3; items (1,1),(1,2),(2,1)")
            connect.start()
            config = debezium_postgres(
                dsn,
                prefix=PREFIX,
                slot="fixture",
                tables=",".join(TABLES),
                extra={
                    "signal.data.collection": "public.debezium_signal",
                    "incremental.snapshot.chunk.size": "2",
                    "tombstones.on.delete": "true",
                },
            )
            connect.add_connector("fixture", config)
            connect.wait_running("fixture")
            step("Connect and Debezium running")
            with psycopg.connect(dsn, autocommit=True) as conn:
                with conn.transaction():
                    conn.execute("INSERT INTO orders VALUES (4, 7.00)")
                    conn.execute("INSERT INTO items VALUES (4, 1, 'd'), (4, 2, 'e'), (4, 3, 'f')")
                step("T1 insert order 4 + items (4,1),(4,2),(4,3)")
                with conn.transaction():
                    conn.execute("UPDATE orders SET total = total + 1 WHERE id = 1")
                    conn.execute("DELETE FROM items WHERE order_id = 2")
                    conn.execute("DELETE FROM orders WHERE id = 2")
                step("T2 update orders 1, delete order 2 and its item")
                with conn.transaction():
                    conn.execute("UPDATE orders SET id = 30 WHERE id = 3")
                step("T3 primary-key update orders 3 -> 30")
            time.sleep(3)  # let Connect flush its offsets past T3
            with psycopg.connect(dsn, autocommit=True) as conn:
                with conn.transaction():
                    conn.execute("INSERT INTO orders VALUES (5, 5.00)")
                    conn.execute("INSERT INTO items VALUES (5, 1, 'g')")
                step("T4 insert order 5 + item (5,1)")
                time.sleep(0.3)
            connect.kill()
            step("SIGKILL Connect (offsets flushed every second: some records are repeated)")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE items SET sku = 'h' WHERE order_id = 1")
                step("T5 (while Connect is down) update items of order 1")
            connect.restart()
            connect.wait_running("fixture")
            step("Connect restarted")
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(
                    "INSERT INTO debezium_signal VALUES ('sig-1', 'execute-snapshot', "
                    """'{"data-collections": ["public.orders"], "type": "incremental"}')"""
                )
                step("signal: execute-snapshot public.orders, incremental, chunks of 2 rows")
                with conn.transaction():
                    conn.execute("INSERT INTO orders VALUES (6, 6.00)")
                    conn.execute("INSERT INTO items VALUES (6, 1, 'i'), (6, 2, 'j')")
                step("T6 insert order 6 + items (6,1),(6,2)")
            time.sleep(5)
            connect.stop()
            step("Connect stopped")
            out.mkdir(parents=True, exist_ok=True)
            for old in out.glob("*.jsonl"):
                old.unlink()
            step(f"dumped {_dump(broker, out)} records")
        finally:
            connect.stop()
            broker.stop()
    (out / "STEPS.txt").write_text("\n".join(steps) + "\n")
    shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    capture(parser.parse_args(argv).out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
