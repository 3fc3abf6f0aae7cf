"""Resolve the test sessions' Spark packages once, before any session starts.

The tests' shared session (``tests/integration/conftest.py``) asks Spark for Delta, s3a and
Spark's Kafka source by Maven coordinates. ``spark_ckpt.spark.packages`` resolves a set of
packages with Ivy on its first use and remembers the jars, so that later sessions start from
them without resolving. On a fresh machine both pytest processes would resolve the same set at
once, into one Ivy cache that Ivy does not lock, and a single failed download (a reset
connection to Maven Central) fails every test of that process: seen on a fresh clone, where 116
tests errored with ``JAVA_GATEWAY_EXITED`` after Ivy's "FAILED DOWNLOADS". ``scripts/test.sh``
runs this module first, in the background while the wheel builds (a resolution is mostly
downloads): the resolution alone (:func:`spark_ckpt.spark.session.package_conf`, no session),
in a process of its own per attempt, tried up to three times. With the jars remembered already
it costs an interpreter start.

The test command runs it before spark-ckpt is installed, with the checkout on ``PYTHONPATH``
(the resolution's modules need nothing compiled). Run: ``python -m harness.spark_packages``.
"""

from __future__ import annotations

import subprocess
import sys
import time

ATTEMPTS = 3
TIMEOUT_S = 600.0


def _resolve_once() -> None:
    """Resolve the tests' packages, or find them remembered (in this process)."""
    from harness.servers.kafka import spark_kafka_package
    from spark_ckpt.spark.session import package_conf

    package_conf({}, s3a=True, packages=[spark_kafka_package()])


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
            print(f"attempt {attempt}: no resolution within {TIMEOUT_S:.0f} s", file=sys.stderr)
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
        _resolve_once()
    else:
        sys.exit(main())
