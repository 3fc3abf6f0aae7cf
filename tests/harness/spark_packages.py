"""Resolve the test session's Spark packages into Ivy's cache once, before sessions start in pairs.

The tests' shared session (``tests/integration/conftest.py``) asks Spark for Delta, s3a and
Spark's Kafka source by Maven coordinates, which Spark resolves with Ivy into ``~/.ivy2*`` on its
first start. On a fresh machine both pytest processes start their sessions at once and download
the same jars into the one cache, which Ivy does not lock, and a single failed download (a reset
connection to Maven Central) fails every test of that process: seen on a fresh clone, where 116
tests errored with ``JAVA_GATEWAY_EXITED`` after Ivy's "FAILED DOWNLOADS". ``scripts/test.sh``
runs this module first: one session, in a process of its own per attempt, tried up to three
times. Its start resolves the packages once (``spark_ckpt.spark.packages``) and remembers their
jars, which every later session of the same packages starts from without resolving; with the
cache warm it costs one session start.

Run: ``python -m harness.spark_packages``.
"""

from __future__ import annotations

import subprocess
import sys
import time

ATTEMPTS = 3
TIMEOUT_S = 600.0


def _start_once() -> None:
    """Start and stop a session with the tests' packages (in this process)."""
    from harness.servers.kafka import spark_kafka_package
    from spark_ckpt.spark.session import local_session

    session = local_session("spark-ckpt-packages", s3a=True, packages=[spark_kafka_package()])
    session.stop()


def main() -> int:
    """Resolve, retrying in a fresh process; the exit status says whether it worked."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            result = subprocess.run(
                [sys.executable, "-m", "harness.spark_packages", "--once"],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            print(f"attempt {attempt}: no session within {TIMEOUT_S:.0f} s", file=sys.stderr)
            continue
        if result.returncode == 0:
            return 0
        failed = [line for line in result.stderr.splitlines() if "::" in line or "Error" in line]
        print(f"attempt {attempt} failed:\n" + "\n".join(failed[-20:]), file=sys.stderr)
        time.sleep(5 * attempt)
    print(f"Spark's packages could not be resolved in {ATTEMPTS} attempts", file=sys.stderr)
    return 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--once"]:
        _start_once()
    else:
        sys.exit(main())
