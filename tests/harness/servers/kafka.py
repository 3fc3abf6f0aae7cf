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

:class:`KafkaCluster` is two nodes, for what one cannot show (a partition's leader moving): the
same combined node, and a broker-only node that joins its quorum; topics of two replicas.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from harness import PEERS
from harness.servers.loopback import free_port
from harness.servers.maven import build_once

__all__ = ["KafkaBroker", "KafkaCluster", "kafka_lib", "signal_group"]

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
    """One KRaft node in its own JVM: broker and controller on two free loopback ports.

    Or, given ``controller``, a broker only (one port), of that node's cluster and quorum
    (:class:`KafkaCluster`).

    Parameters
    ----------
    workdir
        Its configuration, log directory (the records) and ``broker.log`` (the JVM's output,
        appended across restarts); created.
    heap
        The JVM's ``-Xmx``.
    node_id
        Its ``node.id``.
    controller
        The combined node whose quorum this broker joins; None: this node is the controller.
    replicas
        The replication factor of Kafka's internal topics and of topics created here: the
        number of brokers in the cluster.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        heap: str = "512m",
        *,
        node_id: int = 1,
        controller: KafkaBroker | None = None,
        replicas: int = 1,
    ) -> None:
        self.workdir = Path(workdir)
        self.heap = heap
        self.node_id = node_id
        self.controller = controller
        self.replicas = replicas
        self.cluster_id = _cluster_id() if controller is None else controller.cluster_id
        self.port = free_port()
        self.controller_port = free_port() if controller is None else controller.controller_port
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
        voter = 1 if self.controller is None else self.controller.node_id
        listeners = f"PLAINTEXT://127.0.0.1:{self.port}"
        if self.controller is None:
            listeners += f",CONTROLLER://127.0.0.1:{self.controller_port}"
        replicas = str(self.replicas)
        lines = {
            "process.roles": "broker,controller" if self.controller is None else "broker",
            "node.id": str(self.node_id),
            # A static quorum of one voter, the combined node (a broker-only node joins it).
            "controller.quorum.voters": f"{voter}@127.0.0.1:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data),
            # A partition stays writable on its leader alone while the other replica is away.
            "min.insync.replicas": "1",
            "auto.create.topics.enable": "false",
            # Internal topics cannot have more replicas than brokers.
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.controller is None:  # topic defaults are the controller's (Kafka 4 warns else)
            lines |= {"num.partitions": "1", "default.replication.factor": replicas}
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
        self.launch(timeout)
        self.wait_ready(timeout)

    def launch(self, timeout: float = _START_TIMEOUT_S) -> None:
        """Format the storage on first start and start the JVM; do not wait for it.

        Raises
        ------
        RuntimeError
            If formatting fails (with its output).
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        properties = self._properties()
        if not (self.workdir / "data" / "meta.properties").exists():
            formatted = subprocess.run(
                self._java(
                    "kafka.tools.StorageTool",
                    *("format", "-t", self.cluster_id, "-c", str(properties)),
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

    def wait_ready(self, timeout: float = _START_TIMEOUT_S) -> None:
        """Return once this node is a broker of its cluster's metadata (it serves clients).

        Raises
        ------
        RuntimeError
            If the JVM exits, or the node is not there within ``timeout`` (the end of its log).
        """
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
                if self.node_id in metadata.brokers:
                    return
            except Exception:  # not up yet: KafkaException (or a timeout) until it is
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Kafka broker did not answer within {timeout:.0f}s:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def create_topic(self, name: str, partitions: int = 1, timeout: float = 60.0) -> None:
        """Create ``name`` with ``partitions`` (``replicas`` each); wait until it exists."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topic = NewTopic(name, partitions, self.replicas)
        futures = admin.create_topics([topic], operation_timeout=timeout)
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


class KafkaCluster:
    """Two KRaft nodes: node 1 broker and controller (the quorum's one voter), node 2 a broker.

    What a partition leader change needs: topics of two replicas, either broker able to lead
    them. Node 2 holds no part of the quorum, so it can stop (a controlled shutdown moves the
    leadership of its partitions to node 1) and start again while the cluster serves::

        cluster = KafkaCluster(workdir)
        cluster.start()                          # both nodes, in parallel
        cluster.create_topic("t", 3, leader=2)   # replicas [2, 1]: node 2 the preferred leader
        cluster.node(2).stop()                   # leaders move to node 1
        cluster.node(2).restart()
        cluster.elect_preferred(["t"])           # back to node 2, once it is in sync

    Parameters
    ----------
    workdir
        A directory per node (``node-1``, ``node-2``); created.
    heap
        Each JVM's ``-Xmx``.
    """

    def __init__(self, workdir: str | os.PathLike[str], heap: str = "384m") -> None:
        self.workdir = Path(workdir)
        first = KafkaBroker(self.workdir / "node-1", heap, replicas=2)
        second = KafkaBroker(self.workdir / "node-2", heap, node_id=2, controller=first, replicas=2)
        self.nodes = (first, second)

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` naming both brokers, as a client of a cluster is configured."""
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> KafkaBroker:
        """The node of ``node.id`` ``node_id`` (1 or 2)."""
        return self.nodes[node_id - 1]

    def start(self, timeout: float = _START_TIMEOUT_S) -> None:
        """Start both JVMs at once; return once both are brokers of the cluster.

        Raises
        ------
        RuntimeError
            If a node fails to format or start within ``timeout`` (with the end of its log).
        """
        # Formatting is a JVM of its own per node: both at once (seconds each on busy cores).
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            for launched in [pool.submit(node.launch, timeout) for node in self.nodes]:
                launched.result()
        for node in self.nodes:
            node.wait_ready(timeout)

    def stop(self) -> None:
        """Stop both nodes (controlled shutdowns), the broker-only one first."""
        for node in reversed(self.nodes):
            node.stop()

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(
        self, name: str, partitions: int = 1, leader: int = 1, timeout: float = 60.0
    ) -> None:
        """Create ``name``, each partition on both nodes, ``leader`` its preferred leader."""
        from confluent_kafka.admin import NewTopic

        order = [leader, 3 - leader]
        # librdkafka wants the count beside an assignment (-1, the default, is refused).
        topic = NewTopic(name, partitions, replica_assignment=[order] * partitions)
        admin = self._admin()  # kept: the futures resolve only while their client lives
        admin.create_topics([topic], operation_timeout=timeout)[name].result(timeout=timeout)
        # The controller has it; the brokers' metadata may not yet (a leaders() right after
        # found no such topic): wait until every partition has its leader there.
        deadline = time.monotonic() + timeout
        while True:
            found = admin.list_topics(name, timeout=10).topics.get(name)
            led = found is not None and found.error is None and len(found.partitions) == partitions
            if led and all(meta.leader >= 0 for meta in found.partitions.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} has no leader for every partition after {timeout}s")
            time.sleep(0.2)

    def leaders(self, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        """Each partition of ``topics`` and the ``node.id`` of its leader now (-1: none).

        As one broker's metadata has it: a topic it does not know yet has no partitions here.
        """
        metadata = self._admin().list_topics(timeout=10)
        return {
            (topic, partition): meta.leader
            for topic in topics
            if topic in metadata.topics
            for partition, meta in metadata.topics[topic].partitions.items()
        }

    def elect_preferred(self, topics: Sequence[str], timeout: float = 60.0) -> None:
        """Move the leadership of ``topics``' partitions to their preferred (first) replicas.

        A preferred-leader election (KIP-460), retried until every partition is led by its
        preferred replica: it is refused while that replica is not in sync yet (just started).

        Raises
        ------
        RuntimeError
            When some partition is still led by another broker after ``timeout`` seconds.
        """
        from confluent_kafka import ElectionType, TopicPartition

        admin = self._admin()
        deadline = time.monotonic() + timeout
        while True:
            metadata = admin.list_topics(timeout=10)
            off = [
                TopicPartition(topic, partition)
                for topic in topics
                for partition, meta in metadata.topics[topic].partitions.items()
                if meta.leader != meta.replicas[0]
            ]
            if not off:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(off)} partitions not led by their preferred replicas after "
                    f"{timeout:.0f}s: {off}"
                )
            # A partition whose preferred replica is not in sync yet answers
            # PREFERRED_LEADER_NOT_AVAILABLE (in the result, or raised): the loop asks again.
            with contextlib.suppress(Exception):
                admin.elect_leaders(ElectionType.PREFERRED, off).result(timeout=30)
            time.sleep(0.5)
