"""A throwaway Spark standalone cluster on loopback: one master and two workers, for tests.

``SparkCluster(workdir).start()`` runs ``org.apache.spark.deploy.master.Master`` and two
``org.apache.spark.deploy.worker.Worker`` JVMs through pyspark's own ``bin/spark-class``, each a
separate process on 127.0.0.1 with its own work and temp (``SPARK_LOCAL_DIRS``) directories, waits
until both workers have registered with the master, and ``stop()`` ends them. A driver connects
in client mode with ``master=cluster.url``; its executors then run in the workers' JVMs, which
share nothing with the driver but the network, so a path that only exists on the driver's disk
fails there as it would on a real cluster.

``executor_pids()`` finds the executor JVMs (``CoarseGrainedExecutorBackend``) so a test can
SIGKILL one mid-batch, as a lost machine would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from harness.servers.cluster_env import PackedEnvironment
from harness.servers.loopback import free_port

__all__ = ["SparkCluster"]

WORKER_MEMORY = "1536m"
EXECUTOR_MEMORY = "1g"


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkCluster:
    """A standalone master and ``workers`` workers (one core each) on 127.0.0.1.

    Parameters
    ----------
    workdir
        Where the daemons keep their logs, work and temp directories (one per worker).
    workers
        How many workers to start.
    environment
        The executors' Python: a packed environment shipped with ``spark.archives`` (as a real
        cluster gets spark-ckpt). None: the workers' ``PYSPARK_PYTHON``, this machine's venv.
    """

    def __init__(
        self, workdir: str | Path, workers: int = 2, environment: PackedEnvironment | None = None
    ) -> None:
        self.workdir = Path(workdir)
        self.environment = environment
        self.port = free_port()
        self.ui_port = free_port()
        self.workers = workers
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """The master URL a driver connects to."""
        return f"spark://127.0.0.1:{self.port}"

    def _environment(self, local_dirs: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(_spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_DIRS=str(local_dirs),
            SPARK_LOG_DIR=str(self.workdir / "logs"),
            # Executors start Python workers with this interpreter (the one with spark-ckpt).
            PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
            PYTHONSAFEPATH="1",
            SPARK_NO_DAEMONIZE="1",
        )
        return env

    def _spawn(self, name: str, args: list[str], local_dirs: Path) -> None:
        local_dirs.mkdir(parents=True, exist_ok=True)
        log = (self.workdir / f"{name}.log").open("wb")
        command = [str(_spark_home() / "bin" / "spark-class"), *args]
        process = subprocess.Popen(
            command,
            env=self._environment(local_dirs),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._processes.append(process)

    def start(self, timeout: float = 120.0) -> SparkCluster:
        """Start the master and the workers; return once every worker is ALIVE."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
            ],
            self.workdir / "master-tmp",
        )
        for index in range(self.workers):
            work = self.workdir / f"worker-{index}"
            self._spawn(
                f"worker-{index}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    WORKER_MEMORY,
                    "--work-dir",
                    str(work / "work"),
                    "--webui-port",
                    "0",
                ],
                work / "tmp",
            )
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            for process in self._processes:
                if process.poll() is not None:
                    self.stop()
                    raise RuntimeError(
                        f"a Spark daemon exited with {process.returncode}; see {self.workdir}/*.log"
                    )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"only {self.alive_workers()} of {self.workers} workers registered with the "
                    f"master within {timeout:.0f}s; see {self.workdir}/*.log"
                )
            time.sleep(0.5)
        return self

    def alive_workers(self) -> int:
        """Workers the master sees as ALIVE (0 while the master is not answering its JSON)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as r:
                state = json.load(r)
        except (OSError, ValueError):
            # A cold test run once got an HTML page here while the cluster started: keep asking
            # until the deadline, whose error names the logs, instead of failing on the parse.
            return 0
        return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")

    def executor_pids(self) -> list[int]:
        """Process ids of the executor JVMs the workers launched."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                # A worker starts its executors in their application directory under its work dir.
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            executor = b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmdline
            if executor and cwd.startswith(str(self.workdir)):
                pids.append(int(entry))
        return sorted(pids)

    def driver_conf(self) -> dict[str, str]:
        """Spark settings for a client-mode driver of this cluster."""
        return {
            "spark.master": self.url,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.workers),
            "spark.executorEnv.PYTHONSAFEPATH": "1",
            # A killed executor is replaced at once, and a task retried on the survivor.
            "spark.task.maxFailures": "8",
            **(self.environment.spark_conf() if self.environment is not None else {}),
        }

    def driver_directory(self) -> Path | None:
        """The working directory a client-mode driver needs (None: any will do).

        With a packed environment, ``./environment/bin/python`` is every Python worker's
        interpreter, the driver's own (Python data sources plan there) included.
        """
        if self.environment is None:
            return None
        return self.environment.driver_directory(self.workdir)

    def stop(self) -> None:
        """Stop the workers (and their executors) and the master."""
        for process in reversed(self._processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for process in self._processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        for pid in self.executor_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        self._processes.clear()


if (
    __name__ == "__main__"
):  # a cluster for a manual session: python -m harness.servers.spark_cluster DIR
    cluster = SparkCluster(sys.argv[1] if len(sys.argv) > 1 else "/tmp/spark-ckpt-cluster").start()
    print(cluster.url, flush=True)
    try:
        signal.pause()
    finally:
        cluster.stop()
