"""The test harness: what the tests (and the benchmarks in ``bench/``) run against.

- :mod:`harness.servers`: throwaway servers on loopback (PostgreSQL, MariaDB, S3, Kafka, Kafka
  Connect, a Spark standalone cluster) and what they need (free ports, Maven builds of the Java
  peers under ``peers/``, the cluster's packed Python environment);
- :mod:`harness.workloads`: what writes into those servers and logs (transactions on PostgreSQL,
  Debezium's embedded engine, generated change logs) and reads what reached Delta back;
- :mod:`harness.faults`: drivers started in processes of their own and SIGKILLed at protocol
  points, and the checks of what survived.

``tests/`` is on ``sys.path`` as a directory of its own: ``scripts/setup.sh`` writes a ``.pth``
file into the virtualenv, and pytest's ``pythonpath`` option (``pyproject.toml``) adds it too, so
the harness is imported as ``harness.servers.postgres`` and so on, from tests, benchmarks and the
drivers it starts (``python -m harness.faults.crash drive ...``).
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The source checkout (``tests/harness/`` is two levels below it): its ``.cache`` and ``dist``."""
PEERS = Path(__file__).resolve().parent / "peers"
"""The Maven projects of the Java peers the harness runs (Debezium's engine, Kafka)."""
