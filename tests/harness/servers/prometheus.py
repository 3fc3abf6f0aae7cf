"""A throwaway Prometheus server on loopback, built from its Go module on first use.

The server is Prometheus itself (``github.com/prometheus/prometheus``, :data:`VERSION`), built
with ``go install`` from the Go module proxy into ``build/prometheus/<version>/`` with the Go
module and build caches beside it (``build/go``), once per machine: later runs find the binary.
It scrapes the targets it is given every second and loads rule files, so a test can check that
the exporter's text is what a real Prometheus ingests, that a PromQL query sees the values, and
that the alert rules users import load::

    server = PrometheusServer(workdir, targets=["127.0.0.1:9464"], rule_files=[alerts])
    server.start()                 # returns once /-/ready answers
    server.query('spark_ckpt_held_back_changes{query="orders"}')
    server.stop()

Building needs Go (``go`` on PATH, 1.26 or newer for this version); without it the build raises,
saying so, and the test fails (it never skips). The first build costs about 1,100 s of CPU and
1.9 GB of downloaded modules (measured on a 2-core machine: docs/development.md, the soak tier).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import ROOT
from harness.servers.loopback import free_port

__all__ = ["VERSION", "PrometheusServer", "prometheus_binary"]

VERSION = "v0.316.0"
"""The Go module version of Prometheus built (the proxy serves v0.x tags for 3.x releases)."""
MODULE = "github.com/prometheus/prometheus"
BUILD = ROOT / "build"

_START_TIMEOUT_S = 60.0
_BUILD_TIMEOUT_S = 3600.0


def prometheus_binary() -> Path:
    """The ``prometheus`` binary of :data:`VERSION`, built first if this machine has none.

    Raises
    ------
    RuntimeError
        When ``go`` is missing or the build fails (with the end of its output).
    """
    target = BUILD / "prometheus" / VERSION
    binary = target / "prometheus"
    target.mkdir(parents=True, exist_ok=True)
    with (target / "build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per machine; the others wait for it
        if binary.exists():
            return binary
        go = shutil.which("go")
        if go is None:
            raise RuntimeError("cannot build Prometheus: go not found on PATH (Go 1.26 or newer)")
        env = {
            **os.environ,
            "GOBIN": str(target),
            "GOMODCACHE": str(BUILD / "go" / "mod"),
            "GOCACHE": str(BUILD / "go" / "cache"),
            "GOFLAGS": "-mod=mod",
            "CGO_ENABLED": "0",
        }
        started = time.monotonic()
        done = subprocess.run(
            [go, "install", f"{MODULE}/cmd/prometheus@{VERSION}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=_BUILD_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0 or not binary.exists():
            raise RuntimeError(
                f"building Prometheus {VERSION} failed ({done.returncode}):\n"
                f"{(done.stdout + done.stderr)[-4000:]}"
            )
        (target / "build-seconds").write_text(f"{time.monotonic() - started:.0f}\n")
        return binary


class PrometheusServer:
    """One Prometheus process scraping ``targets`` every second (loopback only).

    Parameters
    ----------
    workdir
        Where its configuration and TSDB go.
    targets
        ``host:port`` of the endpoints to scrape (``/metrics``).
    rule_files
        Rule files to load (alerting and recording rules).
    """

    def __init__(
        self, workdir: Path, targets: Sequence[str], rule_files: Sequence[Path] = ()
    ) -> None:
        self.workdir = workdir
        self.targets = list(targets)
        self.rule_files = list(rule_files)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self._log = workdir / "prometheus.log"

    def _config(self) -> Path:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {"job_name": "spark-ckpt", "static_configs": [{"targets": self.targets}]}
            ],
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(json.dumps(config, indent=2))  # YAML is a superset of JSON
        return path

    def start(self) -> None:
        """Start the server; return once it is ready (raises with its log if it is not)."""
        binary = prometheus_binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._config()
        with self._log.open("ab") as log:
            self._process = subprocess.Popen(
                [
                    str(binary),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--web.enable-lifecycle",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        atexit.register(self.stop)
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"Prometheus did not become ready:\n{self.log_tail()}")

    def _get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus answered {body}")
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        data = self._get("/api/v1/query", query=promql)
        return list(data["result"])

    def query_range(
        self, promql: str, start: float, end: float, step: float
    ) -> list[dict[str, Any]]:
        """A range query's result matrix: ``[{"metric": {...}, "values": [[t, "v"], ...]}]``."""
        data = self._get(
            "/api/v1/query_range",
            query=promql,
            start=f"{start:.3f}",
            end=f"{end:.3f}",
            step=str(step),
        )
        return list(data["result"])

    def targets_health(self) -> list[str]:
        """The health of each active scrape target (``up``, ``down``, ``unknown``)."""
        data = self._get("/api/v1/targets")
        return [str(t["health"]) for t in data["activeTargets"]]

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule, with its group, health and state."""
        data = self._get("/api/v1/rules")
        return [rule for group in data["groups"] for rule in group["rules"]]

    def log_tail(self) -> str:
        return self._log.read_text(errors="replace")[-4000:] if self._log.exists() else ""

    def stop(self) -> None:
        """SIGTERM the server (SIGKILL after 20 s); idempotent."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
