"""txn-cdc -> delta-2pc on a Spark standalone cluster, with everything on the S3 server.

The driver runs in a process of its own (client mode) against a master and two workers, each a
separate JVM on 127.0.0.1 with its own work and temp directories. The change log, the table and
the checkpoint are on the S3 server, so nothing passes between the driver and the executors
through a local path. The executors are SIGKILLed while a task of a batch has staged its files
(Spark retries the task), and the same driver is SIGKILLed after a later pre-commit and
started again from the checkpoint on S3. Every source transaction must then be in exactly one
Delta version, whole.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from conftest import wait_until

from harness.faults import crash
from harness.servers.s3 import S3Server
from harness.servers.spark_cluster import SparkCluster
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.storage import Location, StorageOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Two driver runs on the cluster, each shipping the jars to fresh executors: minutes.
pytestmark = pytest.mark.timeout(1800)

STALLED_BATCH = 1
KILLED_BATCH = 3  # the first two files of seed 41 hold about 5 batches of CAP changes
STALL_SECONDS = 120  # long enough to kill the executors; a retried attempt does not stall


class ClusterRun:
    """A scenario's store on S3 and a local copy of its change log, uploaded file by file."""

    def __init__(self, cluster: SparkCluster, server: S3Server, bucket: str, seed: int) -> None:
        self.cwd = cluster.driver_directory()
        self.store = crash.Store.on_s3(server, bucket, uuid.uuid4().hex[:8])
        self.store.settings.conf.update(cluster.driver_conf())
        self.storage = StorageOptions.of(self.store.storage)
        with tempfile.TemporaryDirectory() as staging:
            self.expected = crash.make_log(staging, seed, transactions=60)
            self.files = {name: Path(staging, name).read_bytes() for name in os.listdir(staging)}

    def upload(self, names: list[str]) -> None:
        log = Location(self.store.uri("log"), self.storage)
        for name in names:
            log.child(name).write_bytes(self.files[name])

    def driver(self, fault: str | None, **env: str) -> subprocess.Popen[bytes]:
        paths = [self.store.uri("log"), self.store.uri("table"), self.store.uri("ckpt")]
        args = ["-m", "harness.faults.crash", "drive", *paths, self.store.settings.to_json()]
        return crash.start_driver(args, fault, self.cwd, **env)

    def staged(self, batch_id: int) -> bool:
        staging = Location(f"{self.store.uri('ckpt')}/delta_2pc/staging/{batch_id}", self.storage)
        return bool(staging.list(recursive=True))

    def verify(self, spark: SparkSession) -> tuple[int, int, int, int]:
        return crash.verify(spark, self.store.uri("table"), self.expected, self.store.storage)


@pytest.mark.soak
def test_executor_and_driver_kills_on_a_growing_log_on_s3(
    spark: SparkSession, cluster: SparkCluster, s3_server: S3Server, s3_bucket: str
) -> None:
    """Executors die mid-batch, then the driver dies, the log grows: nothing lost or doubled.

    Run 1: the executors are SIGKILLed while batch 1's task has staged its files (Spark
    retries it on the executors the workers start instead); meanwhile the rest of the log
    arrives, after the bounded run fixed its end. The same run is SIGKILLed, whole driver, after
    a later batch's pre-commit. Run 2 resumes from the checkpoint on S3 and reads the grown log.
    """
    run = ClusterRun(cluster, s3_server, s3_bucket, seed=41)
    names = sorted(run.files)
    run.upload(names[:2])  # the rest arrives while the query runs (about 5 batches of CAP)
    fault = f"after_manifest:{KILLED_BATCH}"
    driver = run.driver(fault, SPARK_CKPT_STALL=f"after_staging:{STALLED_BATCH}:{STALL_SECONDS}")
    try:
        wait_until(lambda: run.staged(STALLED_BATCH), 600, "batch 1 never staged its files")
        victims = cluster.executor_pids()
        assert victims, "no executor JVM runs on the cluster"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        run.upload(names[2:])
        status = crash.finish_driver(driver, fault, timeout=900)
    finally:
        crash._reap_session(driver.pid)
    assert status == -signal.SIGKILL, "the driver was not killed at its fault point"
    assert not set(victims) & set(cluster.executor_pids()), "the killed executors are gone"
    committed = SparkCheckpoint(run.store.uri("ckpt"), run.storage).latest_committed()
    assert committed == KILLED_BATCH - 1, "the killed batch's checkpoint must not be committed"
    assert crash.finish_driver(run.driver(None), None) == 0
    lost, duplicated, torn, versions = run.verify(spark)
    assert (lost, duplicated, torn) == (0, 0, 0)
    assert versions > KILLED_BATCH + 2, "the resumed run did not read the log that grew"


def test_executors_of_the_packed_wheel_read_a_postgres_snapshot_spilled_to_s3(
    spark: SparkSession,
    cluster: SparkCluster,
    s3_server: S3Server,
    s3_bucket: str,
    pg_dsn: str,
    tmp_path: Path,
) -> None:
    """The executors run the packed wheel, and read the snapshot spill on S3 from other JVMs.

    One driver (``cluster_probe.py``) first asks each executor where its Python and both native
    modules come from: the packed environment, which holds the manylinux wheel installed with
    cargo and rustc shadowed by commands that fail (harness.servers.cluster_env), so nothing on
    the executors comes from this machine's venv or sources. It then streams the table's
    snapshot, spilled to S3, into Delta on S3.
    """
    assert cluster.environment is not None, "the test cluster runs without a packed environment"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE spilled (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO spilled SELECT g, 'row ' || g FROM generate_series(1, 500) AS g")
    store = crash.Store.on_s3(s3_server, s3_bucket, uuid.uuid4().hex[:8])
    store.settings.conf.update(cluster.driver_conf())
    store.settings.source = {
        "connector": "postgres",
        "dsn": pg_dsn,
        "slot": "cluster_spill",
        "tables": "public.spilled",
        "snapshotDir": store.uri("spill"),
    }
    probed = tmp_path / "probe.json"
    probe = str(Path(__file__).with_name("cluster_probe.py"))
    args = [probe, str(probed), "-", store.uri("table"), store.uri("ckpt")]
    assert (
        crash.run_killable([*args, store.settings.to_json()], None, cluster.driver_directory()) == 0
    )

    found = json.loads(probed.read_text(encoding="utf-8"))
    assert len(found) == int(cluster.driver_conf()["spark.cores.max"])
    for python, debezium, postgres, cwd in found:
        environment = Path(cwd) / "environment"
        assert Path(cwd).is_relative_to(cluster.workdir), f"{cwd}: not an executor's directory"
        assert Path(python).is_relative_to(environment), f"the executor ran {python}"
        for module in (debezium, postgres):
            assert Path(module).is_relative_to(environment / "lib"), module
            assert module.endswith(".abi3.so"), f"{module}: not the abi3 wheel's module"
    rows = spark.read.format("delta").load(store.uri("table")).collect()
    assert sorted(json.loads(r.key)["id"] for r in rows) == list(range(1, 501))
    assert {r.op for r in rows} == {"r"}
