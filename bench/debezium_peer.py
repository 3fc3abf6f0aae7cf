"""The Debezium peer of the ``*_vs_debezium`` benchmarks: its jars, built with Maven on first use.

``bench/peers/debezium`` is a small Maven project: Debezium's embedded engine into a handler that
only counts records (``CountingPeer.java``). Two builds of the same source: the default one on
Debezium 3.6.1.Final with its PostgreSQL connector, and ``-Pmariadb`` on the 3.5.0.Final stack
with its MariaDB connector (the last release of it on Maven Central; see the pom). Each is built
once, into the project-local Maven repository, by ``harness.servers.maven.build_once`` (never by
the test suite).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Literal

from harness.servers.maven import build_once

PEER = Path(__file__).resolve().parent / "peers" / "debezium"


def peer_jar(connector: Literal["postgres", "mariadb"] = "postgres") -> Path:
    """The peer's runnable jar for ``connector``, built if missing."""
    if connector not in ("postgres", "mariadb"):
        raise ValueError(f"no Debezium peer for {connector!r}: postgres or mariadb")
    if connector == "mariadb":
        jar = PEER / "target" / "debezium-counting-peer-mariadb.jar"
        return build_once(PEER, jar, ["-Pmariadb", "package"], what="the Debezium MariaDB peer")
    jar = PEER / "target" / "debezium-counting-peer.jar"
    return build_once(PEER, jar, ["package"], what="the Debezium PostgreSQL peer")


def peer_command(jar: Path, settings: dict[str, str]) -> list[str]:
    """The command line of one peer run: ``java -jar JAR --name value ...``."""
    command = ["java", "-jar", str(jar)]
    for name, value in settings.items():
        command += [f"--{name}", value]
    return command


def run_peer(
    jar: Path, settings: dict[str, str], expect: int, *, exact: bool = True
) -> tuple[float, dict[str, Any]]:
    """One run of the peer to ``expect`` records; (seconds from JVM launch to exit, its JSON).

    Raises ``SystemExit`` when the peer fails, or counts other than ``expect`` records (with
    ``exact=False``: fewer).
    """
    began = time.perf_counter()
    done = subprocess.run(
        peer_command(jar, {**settings, "expect": str(expect)}),
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"the Debezium peer failed ({done.returncode}): {done.stderr[-3000:]}")
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if figures["records"] < expect or (exact and figures["records"] != expect):
        raise SystemExit(f"the Debezium peer counted {figures['records']} records, not {expect}")
    return seconds, figures
