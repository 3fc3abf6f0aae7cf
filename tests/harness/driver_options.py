"""What every Spark driver the tests start runs with: expressions and plans interpreted.

The tests' processes' sessions, the crash tests' drivers and the Connect servers alike:
spark-submit passes ``SPARK_SUBMIT_OPTS`` to the driver's JVM, and Spark's configuration takes the
``spark.*`` system properties. The tests' batches are a few rows, where Spark spent more driver
CPU generating Java and compiling it with Janino (for each new projection, filter and plan) than
on the rows. Measured side by side on four integration modules (test_delta_2pc,
test_txn_cdc_streaming, test_mirror, test_supervisor; 36 tests, -n 2, alternating): driver JVM
CPU 256-275 s -> 217-219 s, wall 246-263 s -> 227-232 s. What Spark computes is the same either
way (Spark's own suites run both); ``bench/`` and the demo keep Spark's defaults. (Not
``SPARK_CONF_DIR``: it puts a directory on the driver's class path, where the crash drivers'
class-data-sharing archive refuses one.)
"""

from __future__ import annotations

from collections.abc import MutableMapping

INTERPRETED = ("spark.sql.codegen.wholeStage=false", "spark.sql.codegen.factoryMode=NO_CODEGEN")


def interpret_drivers(environment: MutableMapping[str, str]) -> None:
    """Add :data:`INTERPRETED` to ``SPARK_SUBMIT_OPTS`` in ``environment`` (set ones stay).

    Runs once per process that starts drivers (the test processes, the archive's dump), before
    the first.
    """
    options = environment.get("SPARK_SUBMIT_OPTS", "")
    environment["SPARK_SUBMIT_OPTS"] = " ".join(
        [options, *(f"-D{p}" for p in INTERPRETED if p.split("=")[0] not in options)]
    ).strip()
