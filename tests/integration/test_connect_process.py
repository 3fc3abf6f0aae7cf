"""The Spark Connect tests (``tests/connect``): one test of the main run, in a pytest of their own.

pyspark starts a Connect server in the client's own process, which cannot share that process
with a classic SparkSession: ``tests/connect`` needs a pytest process without the main run's
shared session. Run alone after the main run, as the test command used to, they kept one core
busy for 163 s while the other waited (a Connect client mostly waits on its server). As a test
of the main run, pytest-xdist places them beside the other tests like any module, in a fresh
``pytest`` started here; their own output (and their slowest tests) comes back in this test's
failure message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# The demo through Connect alone took 77 s, the whole module 163 s, on two busy cores.
TIMEOUT_S = 1500


def _own_environment() -> dict[str, str]:
    """The environment of this process, without what belongs to this pytest run.

    xdist's worker variables and ``PYTEST_ADDOPTS`` (a ``--junitxml`` there would overwrite the
    main run's report) stay behind; everything else (Java options, the hypothesis profile,
    ``PYTHONSAFEPATH``) is the Connect run's too.
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env["PYTHONSAFEPATH"] = "1"
    return env


@pytest.mark.timeout(TIMEOUT_S + 60)
def test_the_connect_tests_pass_in_a_pytest_process_of_their_own() -> None:
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "pytest", "-p", "no:cacheprovider", "--durations=5", "-q"),
            str(ROOT / "tests" / "connect"),
        ],
        cwd=ROOT,
        env=_own_environment(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    summary = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
    assert done.returncode == 0, (
        f"tests/connect failed (exit {done.returncode}): {summary[0]}\n"
        f"{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    )
    print(done.stdout[-1500:])  # the Connect run's slowest tests, in this test's captured output
