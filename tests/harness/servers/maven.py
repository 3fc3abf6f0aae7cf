"""Build a Java peer under ``tests/harness/peers/`` with Maven, once, whoever asks first.

The tests' Java parts (Debezium's embedded engine, Apache Kafka) come from Maven Central into the
project-local repository ``.cache/maven`` (a ``~/.m2`` holding POMs without jars breaks Spark's
Ivy resolution of Delta's jars). A build runs only when its output is missing or older than the
project's sources, under an exclusive file lock in ``.cache`` shared by every peer (they share
the Maven repository), so concurrent callers (pytest-xdist workers, benchmarks) build once, and
nobody uses an output while a build may be writing it (the lock is taken shared to check)::

    build_once(PROJECT, JAR, ["-Pmariadb", "package"], what="the Debezium writer")
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from harness import ROOT

__all__ = ["CACHE", "MAVEN_REPO", "build_once"]

CACHE = ROOT / ".cache"
MAVEN_REPO = CACHE / "maven"

_BUILD_TIMEOUT_S = 1800.0
_LOG_TAIL_CHARS = 4000


def _newest_source_mtime(project: Path) -> float:
    sources = [project / "pom.xml", *(p for p in (project / "src").rglob("*") if p.is_file())]
    return max(p.stat().st_mtime for p in sources)


def _fresh(project: Path, output: Path) -> bool:
    return output.exists() and output.stat().st_mtime >= _newest_source_mtime(project)


def build_once(project: Path, output: Path, goals: Sequence[str], *, what: str) -> Path:
    """``output``, built first with ``mvn -q -B <goals>`` in ``project`` if missing or stale.

    Runs in the calling process (a test's or a benchmark's), at most once per change of the
    project's sources. ``output`` is a file or a directory the build creates (its modification
    time is compared with the newest source's).

    Raises
    ------
    RuntimeError
        If ``mvn`` or ``java`` is missing, another process holds the lock for over 30 minutes,
        or the build fails (with the end of Maven's output).
    """
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "peers.build.lock").open("a") as lock:
        # A build holds the lock exclusively while Maven writes its output in place (the shade
        # plugin writes the jar, copy-dependencies fills the directory file by file): an output
        # is trusted only under the shared lock, never while a build may still be writing it.
        _lock(lock, fcntl.LOCK_SH)
        if _fresh(project, output):
            return output
        fcntl.flock(lock, fcntl.LOCK_UN)
        missing = [tool for tool in ("mvn", "java") if shutil.which(tool) is None]
        if missing:
            raise RuntimeError(
                f"cannot build {what}: {' and '.join(missing)} not found on PATH "
                "(Debian: apt-get install openjdk-17-jdk-headless maven)"
            )
        _lock(lock, fcntl.LOCK_EX)
        try:
            if _fresh(project, output):  # built by whoever held the lock before us
                return output
            command = ["mvn", "-q", "-B", f"-Dmaven.repo.local={MAVEN_REPO}", "-DskipTests"]
            command += goals
            try:
                result = subprocess.run(
                    command,
                    cwd=project,
                    capture_output=True,
                    text=True,
                    timeout=_BUILD_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired as e:
                raise RuntimeError(f"building {what} took over {_BUILD_TIMEOUT_S:.0f}s") from e
            if result.returncode != 0 or not output.exists():
                tail = (result.stdout + result.stderr).strip()[-_LOG_TAIL_CHARS:]
                raise RuntimeError(
                    f"building {what} failed ({' '.join(command)} in {project}, "
                    f"exit {result.returncode}):\n{tail}"
                )
            output.touch()  # newer than the sources even when Maven left it as it was
            return output
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _lock(lock: IO[str], mode: int) -> None:
    """Take ``lock`` in ``mode`` (shared or exclusive), waiting at most the build timeout."""
    deadline = time.monotonic() + _BUILD_TIMEOUT_S
    while True:
        try:
            fcntl.flock(lock, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"another process held the peers' build lock for {_BUILD_TIMEOUT_S:.0f}s "
                    f"({lock.name})"
                ) from None
            time.sleep(0.5)
