"""A throwaway Kafka Connect worker (standalone mode) running Debezium, for tests and benchmarks.

Kafka Connect itself, from Maven Central (``tests/harness/peers/kafka``: ``connect-runtime`` and
``connect-json`` at the broker's version, with ``debezium-connector-postgres``), started as
Kafka's ``connect-standalone.sh`` starts it: ``org.apache.kafka.connect.cli.ConnectStandalone``
with a worker configuration. Connectors are added and removed through the worker's REST API on a
free loopback port, so one worker can serve several tests, each capturing its own database::

    connect = KafkaConnect(workdir, broker.bootstrap).start()
    connect.add_connector("orders", debezium_postgres(dsn, prefix="dbz", slot="s1"))
    connect.wait_running("orders")
    ...                                  # records arrive in the broker's topics
    connect.kill(); connect.restart()    # SIGKILL, then the same offsets file and REST port

Standalone mode keeps source offsets in a local file (``offset.storage.file.filename``),
flushed every ``offset_flush_ms``; a SIGKILL loses what was not flushed, so Debezium repeats
those records after a restart, as in production. Exactly-once source support (KIP-618) exists
in distributed mode only.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from harness.servers.kafka import kafka_lib, signal_group
from harness.servers.loopback import free_port

__all__ = ["KafkaConnect", "debezium_postgres"]

_START_TIMEOUT_S = 120.0
_LOG_TAIL_CHARS = 4000
POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


def debezium_postgres(
    dsn: str,
    *,
    prefix: str,
    slot: str,
    tables: str | None = None,
    partitions: int = 1,
    snapshot_mode: str = "initial",
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A Debezium PostgreSQL connector's configuration for the database at ``dsn``.

    pgoutput, transaction metadata on (``<prefix>.transaction``), decimals as exact strings;
    Connect creates the topics (``topic.creation.default.*``) with ``partitions`` partitions,
    since the test broker does not create topics on demand.
    """
    parts = urlsplit(dsn)
    config = {
        "connector.class": POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "database.hostname": parts.hostname or "127.0.0.1",
        "database.port": str(parts.port or 5432),
        "database.user": parts.username or "postgres",
        "database.password": parts.password or "",
        "database.dbname": parts.path.lstrip("/"),
        "topic.prefix": prefix,
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": f"{slot}_pub",
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": snapshot_mode,
        "provide.transaction.metadata": "true",
        "decimal.handling.mode": "string",
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": str(partitions),
    }
    if tables:
        config["table.include.list"] = tables
    config.update(extra or {})
    return config


class KafkaConnect:
    """One standalone Connect worker in its own JVM.

    Parameters
    ----------
    workdir
        Its worker configuration, offsets file and ``connect.log`` (the JVM's output, appended
        across restarts); created.
    bootstrap
        The broker's ``bootstrap.servers``.
    schemas
        Kafka Connect's JSON converter with its schema envelope (``schemas.enable``).
    offset_flush_ms
        ``offset.flush.interval.ms``: how often source offsets are saved.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str],
        bootstrap: str,
        *,
        schemas: bool = True,
        offset_flush_ms: int = 1000,
        heap: str = "512m",
    ) -> None:
        self.workdir = Path(workdir)
        self.bootstrap = bootstrap
        self.schemas = schemas
        self.offset_flush_ms = offset_flush_ms
        self.heap = heap
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._connectors: dict[str, dict[str, str]] = {}
        atexit.register(self._reap)

    @property
    def url(self) -> str:
        """The REST API's base URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        """The JVM's output, appended across restarts."""
        return self.workdir / "connect.log"

    def _worker_properties(self) -> Path:
        schemas = str(self.schemas).lower()
        lines = {
            "bootstrap.servers": self.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
            "offset.storage.file.filename": str(self.workdir / "offsets.dat"),
            "offset.flush.interval.ms": str(self.offset_flush_ms),
            "listeners": self.url,
            # Plugins are on the class path (target/lib) and declare themselves in
            # META-INF/services (Debezium 3.x does): found without scanning every jar.
            "plugin.discovery": "service_load",
        }
        path = self.workdir / "worker.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()), encoding="utf-8")
        return path

    def start(self, timeout: float = _START_TIMEOUT_S) -> KafkaConnect:
        """Start the worker and return once its REST API answers; re-adds known connectors.

        Raises
        ------
        RuntimeError
            If the JVM exits or does not answer within ``timeout`` (with the end of its log).
        """
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("the Connect worker is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        properties = self._worker_properties()
        self._log = self.log_file.open("ab")
        self._log.write(f"--- worker start at {time.strftime('%H:%M:%S')} ---\n".encode())
        self._log.flush()
        self.process = subprocess.Popen(
            [
                "java",
                f"-Xmx{self.heap}",
                "-Djava.awt.headless=true",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                f"{kafka_lib()}/*",
                "org.apache.kafka.connect.cli.ConnectStandalone",
                str(properties),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive("starting")
            try:
                self._request("GET", "/connectors")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"Kafka Connect did not answer within {timeout:.0f}s:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.5)
        for name, config in self._connectors.items():
            self._request("PUT", f"/connectors/{name}/config", config)
        return self

    def add_connector(self, name: str, config: Mapping[str, str]) -> None:
        """Create (or reconfigure) connector ``name``; it is re-added after a restart."""
        self._connectors[name] = dict(config)
        self._request("PUT", f"/connectors/{name}/config", dict(config))

    def delete_connector(self, name: str) -> None:
        """Stop and remove connector ``name`` (its offsets stay in the offsets file)."""
        self._connectors.pop(name, None)
        self._request("DELETE", f"/connectors/{name}")

    def status(self, name: str) -> dict[str, Any]:
        """The REST API's status of connector ``name``."""
        status: dict[str, Any] = self._request("GET", f"/connectors/{name}/status")
        return status

    def wait_running(self, name: str, timeout: float = 120.0) -> None:
        """Block until the connector and its task run.

        Raises
        ------
        RuntimeError
            If a task fails (with its trace) or it is not running within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            self._check_alive(f"starting connector {name}")
            try:
                last = self.status(name)
            except urllib.error.HTTPError:
                last = None  # not created yet
            if last is not None:
                tasks = last.get("tasks", [])
                failed = [t for t in tasks if t.get("state") == "FAILED"]
                if failed:
                    raise RuntimeError(f"connector {name} failed: {failed[0].get('trace', '')}")
                running = last.get("connector", {}).get("state") == "RUNNING"
                if running and tasks and all(t.get("state") == "RUNNING" for t in tasks):
                    return
            time.sleep(0.5)
        raise RuntimeError(
            f"connector {name} was not running after {timeout:.0f}s (status {last}):\n"
            f"{self.log_tail()}"
        )

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
        return json.loads(text) if text else None

    def _check_alive(self, doing: str) -> None:
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            raise RuntimeError(
                f"Kafka Connect exited with {code} while {doing}:\n{self.log_tail()}"
            )

    def log_tail(self, chars: int = _LOG_TAIL_CHARS) -> str:
        """The end of ``connect.log`` (Connect masks password settings in what it logs)."""
        if not self.log_file.exists():
            return "(no Connect log)"
        return self.log_file.read_bytes()[-chars:].decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL the worker: offsets not yet flushed are lost, so Debezium repeats records."""
        self._signal(signal.SIGKILL, 30.0)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM: connectors stop and offsets are flushed; SIGKILL after ``timeout``."""
        self._signal(signal.SIGTERM, timeout)

    def restart(self, timeout: float = _START_TIMEOUT_S) -> KafkaConnect:
        """Start again with the same REST port, offsets file and connectors."""
        return self.start(timeout)

    def _signal(self, sig: signal.Signals, timeout: float) -> None:
        process, self.process = self.process, None
        signal_group(process, sig, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _reap(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
