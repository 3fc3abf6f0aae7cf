"""A throwaway Apache Kafka broker on loopback for tests and benchmarks (KRaft, one node).

The broker is Apache Kafka itself, from Maven Central (``tests/harness/peers/kafka``:
``kafka_2.13`` at the version Debezium 3.6.1.Final is built on, copied into ``target/lib`` by
Maven with the project-local repository ``.cache/maven``). One JVM plays both KRaft roles
(``process.roles=broker,controller``, a static one-voter quorum), as Kafka's quickstart runs it;
its storage is formatted once with ``kafka.tools.StorageTool`` and kept across
:meth:`KafkaBroker.kill` and :meth:`KafkaBroker.restart`, so a restarted broker has every record
it had::

    broker = KafkaBroker(workdir)
    broker.start()                 # returns once the broker answers a metadata request
    broker.create_topic("dbz.public.orders", partitions=3)
    ...                            # produce and consume at broker.bootstrap
    broker.kill()                  # SIGKILL
    broker.restart()               # same ports, same log directory
    broker.stop()                  # SIGTERM, a controlled shutdown

Transactions work on one node: the transaction state log and the offsets topic are created with
replication factor 1 (read_committed consumers and transactional producers, KIP-98).
"""

from __future__ import annotations

import atexit
import base64
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import IO

from harness import PEERS
from harness.servers.loopback import free_port
from harness.servers.maven import build_once

__all__ = ["KafkaBroker", "kafka_lib", "signal_group"]

PROJECT = PEERS / "kafka"
LIB = PROJECT / "target" / "lib"

_START_TIMEOUT_S = 120.0
_LOG_TAIL_CHARS = 4000


def signal_group(process: subprocess.Popen[bytes] | None, sig: int, timeout: float) -> None:
    """Send ``sig`` to a JVM's process group; SIGKILL it if it outlives ``timeout`` seconds."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, sig)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30.0)


def _cluster_id() -> str:
    """A random cluster id as Kafka's ``Uuid.randomUuid()`` makes one.

    A UUID in URL-safe base64 without padding, never starting with ``-``: Kafka's own generator
    draws again then, since ``kafka-storage format -t -abc...`` reads the id as an option (it
    failed here one start in 64: "argument --cluster-id/-t: expected one argument").
    """
    while True:
        cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster.startswith("-"):
            return cluster


def spark_kafka_package() -> str:
    """Spark's own Kafka source (``spark-sql-kafka-0-10``) for this PySpark, from Maven Central."""
    import pyspark

    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def kafka_lib() -> Path:
    """The directory of Kafka's jars (and Kafka Connect's, and Debezium's PostgreSQL connector).

    Runs in the calling process; builds with Maven the first time (:mod:`harness.servers.maven`).
    """
    return build_once(PROJECT, LIB, ["package"], what="Apache Kafka's jars")


class KafkaBroker:
    """One KRaft node (broker and controller) in its own JVM, on two free loopback ports.

    Parameters
    ----------
    workdir
        Its configuration, log directory (the records) and ``broker.log`` (the JVM's output,
        appended across restarts); created.
    heap
        The JVM's ``-Xmx``.
    """

    def __init__(self, workdir: str | os.PathLike[str], heap: str = "512m") -> None:
        self.workdir = Path(workdir)
        self.heap = heap
        self.port = free_port()
        self.controller_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        atexit.register(self._reap)

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` for clients: ``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        """The JVM's output, appended across restarts."""
        return self.workdir / "broker.log"

    def _properties(self) -> Path:
        data = self.workdir / "data"
        path = self.workdir / "server.properties"
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            # One node: internal topics cannot have more replicas than brokers.
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()), encoding="utf-8")
        return path

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            "java",
            f"-Xmx{self.heap}",
            "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            f"{kafka_lib()}/*",
            main,
            *args,
        ]

    def start(self, timeout: float = _START_TIMEOUT_S) -> None:
        """Format the storage on first start, start the JVM, return once it answers clients.

        Raises
        ------
        RuntimeError
            If formatting fails, or the broker exits or does not answer within ``timeout``
            (with the end of its log).
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        properties = self._properties()
        if not (self.workdir / "data" / "meta.properties").exists():
            cluster = _cluster_id()
            formatted = subprocess.run(
                self._java(
                    "kafka.tools.StorageTool", "format", "-t", cluster, "-c", str(properties)
                ),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if formatted.returncode != 0:
                raise RuntimeError(
                    f"formatting the Kafka broker's storage failed (exit {formatted.returncode}):"
                    f"\n{(formatted.stdout + formatted.stderr)[-_LOG_TAIL_CHARS:]}"
                )
        self._log = self.log_file.open("ab")
        self._log.write(f"--- broker start at {time.strftime('%H:%M:%S')} ---\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(
            self._java("kafka.Kafka", str(properties)),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"the Kafka broker exited with {self.process.returncode} while starting:\n"
                    f"{self.log_tail()}"
                )
            try:
                metadata = admin.list_topics(timeout=2)
                if metadata.brokers:
                    return
            except Exception:  # not up yet: KafkaException (or a timeout) until it is
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Kafka broker did not answer within {timeout:.0f}s:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 60.0) -> None:
        """Create ``name`` with ``partitions`` (replication factor 1); wait until it exists."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=timeout)
        futures[name].result(timeout=timeout)

    def log_tail(self, chars: int = _LOG_TAIL_CHARS) -> str:
        """The end of ``broker.log``."""
        if not self.log_file.exists():
            return "(no broker log)"
        return self.log_file.read_bytes()[-chars:].decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL the broker (records not yet flushed to disk may be lost, as on a crash)."""
        self._signal(signal.SIGKILL, 30.0)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM: a controlled shutdown; SIGKILL if it takes longer than ``timeout``."""
        self._signal(signal.SIGTERM, timeout)

    def restart(self, timeout: float = _START_TIMEOUT_S) -> None:
        """Start again on the same ports and storage (after :meth:`kill` or :meth:`stop`)."""
        self.start(timeout)

    def _signal(self, sig: signal.Signals, timeout: float) -> None:
        process, self.process = self.process, None
        signal_group(process, sig, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _reap(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
