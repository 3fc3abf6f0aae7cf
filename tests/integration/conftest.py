"""One SparkSession (with Delta) and one PostgreSQL server for the whole integration session."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kafka_fixtures import kafka_broker, kafka_connect  # noqa: F401  (fixtures)
from mariadb_fixtures import mariadb_database, mariadb_server  # noqa: F401  (fixtures)

import spark_ckpt
from harness.servers.cluster_env import packed_environment, release_wheel
from harness.servers.postgres import PgCluster
from harness.servers.spark_cluster import SparkCluster
from spark_ckpt import local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from harness.servers.s3 import S3Server


@pytest.fixture(scope="session")
def spark(s3_server: S3Server) -> Iterator[SparkSession]:
    """A local[2] session with Delta, s3a (reaching the S3 server) and Spark's own Kafka source.

    Shared by every test of a pytest process. Spark's Kafka source is there for the tests that
    set it beside the kafka connector.
    """
    from harness.servers.kafka import spark_kafka_package

    session = local_session(
        "spark-ckpt-tests",
        conf=s3_server.spark_conf(),
        s3a=True,
        packages=[spark_kafka_package()],
    )
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(scope="session")
def control(spark: SparkSession) -> spark_ckpt.Control:
    """The control plane, installed once into the shared session."""
    return spark_ckpt.install(spark)


@pytest.fixture
def restart_conf(spark: SparkSession) -> Iterator[Callable[..., None]]:
    """Set spark.ckpt.* keys for one test; unset them afterwards."""
    touched: list[str] = []

    def set_conf(**settings: str) -> None:
        for key, value in settings.items():
            name = "spark.ckpt." + key.replace("__", ".")
            spark.conf.set(name, value)
            touched.append(name)

    yield set_conf
    for name in touched:
        spark.conf.unset(name)


MAX_POLL_PAUSE_S = 1.0
"""The longest pause between two polls of :func:`wait_until`."""


def wait_until(predicate: Callable[[], bool], timeout: float, message: str) -> None:
    """Poll ``predicate`` until true; fail with ``message`` after ``timeout`` seconds.

    Between two polls it sleeps 0.1 s, or as long as the predicate took when that is longer,
    at most :data:`MAX_POLL_PAUSE_S`. Many predicates read a table through Spark or delta-rs (a
    Spark job takes 0.3 to 1 s on two busy cores): polled back to back, they kept a core busy
    for the whole wait, beside the query they waited for. The pause is bounded because a
    predicate's time grows with the machine's load (a whole mirror compared through Spark took
    30 to 90 s): a pause of twice that, unbounded, left minutes between a query catching up and
    the poll that saw it. A cheap predicate is still polled every 0.1 s.
    """
    deadline = time.monotonic() + timeout
    while True:
        started = time.monotonic()
        if predicate():
            return
        now = time.monotonic()
        if now > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {message}")
        pause = min(max(0.1, now - started), MAX_POLL_PAUSE_S)
        time.sleep(min(pause, max(0.0, deadline - now) + 0.01))


def workers_stderr(request: pytest.FixtureRequest) -> str | None:
    """What the JVM and its Python workers wrote to stderr in this test's call so far.

    The session's JVM started under pytest's global capture and writes to its file, which
    ``capfd`` never sees (it captures this process's own writes); the Python workers' log lines
    (the connector's warnings) go through the JVM's stderr. None when pytest does not capture
    (``-s``).
    """
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if capture is None or not capture.is_globally_capturing():
        return None
    return str(capture.read_global_capture().err)


@pytest.fixture(scope="session")
def cluster() -> Iterator[SparkCluster]:
    """A standalone master and two workers on loopback, started by the first test needing it."""
    workdir = tempfile.mkdtemp(prefix="spark-ckpt-cluster-")
    try:
        # The executors run the released wheel from a packed environment (issue 32), not this
        # venv; the environment and its archive (about 1 GB) go with the work directory.
        environment = packed_environment(release_wheel(), Path(workdir, "environment"))
        started = SparkCluster(workdir, environment=environment).start()
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    yield started
    started.stop()
    # The venv, its archive and every executor's unpacked copy: hundreds of thousands of files
    # (14 s to remove here). Removed beside the next tests, by a process of its own.
    subprocess.Popen(
        ["rm", "-rf", "--", workdir],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgCluster]:
    """A real PostgreSQL server with wal_level=logical on loopback, stopped at the end."""
    # Not under pytest's tmp_path: its parents are private to root, and the server runs as the
    # postgres user when the tests run as root.
    cluster = PgCluster(tempfile.mkdtemp(prefix="spark-ckpt-pg-")).start()
    yield cluster
    cluster.stop()
    shutil.rmtree(cluster.workdir, ignore_errors=True)


@pytest.fixture(params=["wal2json", "pgoutput"])
def pg_plugin(request: pytest.FixtureRequest) -> str:
    """The output plugin: a postgres test that takes it runs once with each."""
    return str(request.param)


one_plugin = pytest.mark.parametrize("pg_plugin", ["pgoutput"], indirect=True)
"""For a postgres test whose subject is the slot, the options or the checkpoint, not decoding:
it runs with pgoutput only (PostgreSQL's own, what every managed PostgreSQL offers; the
connector's default is wal2json). Everything a plugin decodes goes through one ``OutputPlugin``
interface (``sources/postgres/decoding``), whose two implementations the tests of decoding
(values, keys, truncation, columns, filtering, heartbeats, schema changes, the incremental
snapshot's windows) run with both plugins; running the slot's tests twice only repeated the
same slot code."""

pgoutput_then_wal2json_in_soak = pytest.mark.parametrize(
    "pg_plugin", ["pgoutput", pytest.param("wal2json", marks=pytest.mark.soak)], indirect=True
)
"""For a postgres scenario of a minute or more (a migration sequence, a live workload with
restarts): the test command runs it with pgoutput, the soak tier (``bench/soak.sh``) with
wal2json as well. What the plugins decode differently is tested with both plugins in the test
command by the decoding tests (values, keys, truncation, columns, schema detection), which take
seconds each; a second plugin's run of a long scenario repeats the same recovery and mirror code
for a minute or more."""


@pytest.fixture
def pg_dsn(pg_server: PgCluster) -> Iterator[str]:
    """A fresh database for one test (its slots are dropped afterwards); yields its DSN."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_server.dsn(name)
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE database = %s AND NOT active",
            (name,),
        )


@contextlib.contextmanager
def slow_wal_writer(server: PgCluster, delay: str) -> Iterator[None]:
    """Let the WAL writer flush asynchronous commits only every ``delay`` (restored after)."""
    import psycopg

    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET wal_writer_delay = '{delay}'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET wal_writer_delay")
            conn.execute("SELECT pg_reload_conf()")
