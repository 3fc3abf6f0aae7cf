"""The Spark driver SIGKILLed once and restarted while Debezium writes (PostgreSQL, MariaDB).

Debezium's embedded engine (``harness.workloads.debezium``) captures the test database
(``debezium_postgres``, ``debezium_mariadb_capture``) while a workload runs. The query runs in a
driver process of its own (``harness.faults.debezium``): the first is killed with its whole
session (JVM and Python workers) once batch 3's manifest is durable and before Spark commits the
batch; the second starts on the same checkpoint, publishes what the first left behind, reads a
second workload as it is written, and drains once everything reached Delta. Each workload
transaction logs its own id (PostgreSQL's xid, a MariaDB ``txlog`` row with its GTID known) in
``txlog``, so every committed transaction can be found in the table under Debezium's transaction
id. The table is read back with delta-rs: this test starts no JVM of its own, one per driver run
only. The same flow runs on both databases; MariaDB's workload is smaller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import pytest
from changelog_checks import Row, whole_once
from conftest import wait_until
from debezium_mariadb_capture import MariaDbCapture
from debezium_postgres import PostgresCapture

from harness.faults.debezium import DebeziumDriver, delta_changes, delta_txn_ids
from harness.workloads.debezium import DebeziumWriter
from spark_ckpt.model.events import StartEvent
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog

# The soak tier (bench/soak.sh): the test command kills drivers reading Debezium's logs in
# test_crash_recovery (every protocol point) and test_debezium_schema_changes' siblings.
pytestmark = pytest.mark.soak

KILL_BATCH = 3
"""The batch whose manifest is the first driver's last act (batch 0 is the snapshot)."""
ACCOUNTS = 30


class Capture(Protocol):
    """A captured test database: ``PostgresCapture`` or ``MariaDbCapture``."""

    accounts: int

    @property
    def accounts_table(self) -> str: ...

    def create_schema(self) -> None: ...
    def writer(self, tmp_path: Path) -> DebeziumWriter: ...
    def start_workload(
        self, name: str, transactions: int, seed: int
    ) -> Callable[[float], list[str]]: ...
    def large_transaction(self, rows: int) -> str: ...
    def assert_folds_to_tables(self, rows: Sequence[Row]) -> None: ...


@pytest.fixture
def capture(request: pytest.FixtureRequest) -> Capture:
    """The database ``database`` names, a fresh one of the session's server."""
    if request.getfixturevalue("database") == "postgres":
        return PostgresCapture(
            request.getfixturevalue("pg_server"), request.getfixturevalue("pg_dsn"), ACCOUNTS
        )
    return MariaDbCapture(
        request.getfixturevalue("mariadb_server"),
        request.getfixturevalue("mariadb_database"),
        ACCOUNTS,
    )


@pytest.mark.parametrize(
    ("database", "first_size", "large_size", "second_size"),
    [
        pytest.param("postgres", 60, 2000, 40, id="postgres"),
        pytest.param("mariadb", 40, 1000, 20, id="mariadb"),
    ],
)
def test_a_driver_killed_mid_batch_resumes_and_lands_every_transaction_whole_once(
    database: str,
    first_size: int,
    large_size: int,
    second_size: int,
    capture: Capture,
    tmp_path: Path,
) -> None:
    """Killed after batch 3's manifest, restarted: each unit in one version, whole; tables fold."""
    capture.create_schema()
    writer = capture.writer(tmp_path)
    table = tmp_path / "table"
    (tmp_path / "log").mkdir()
    driver = DebeziumDriver(tmp_path / "log", table, tmp_path / "ckpt", tmp_path / "driver")
    committed: list[str] = []
    try:
        # Small batches, so that batch 3 comes while the first workload is still being read.
        # Both JVMs start at once: the driver reads an empty log until Debezium writes.
        driver.start(fault=f"after_manifest:{KILL_BATCH}", max_changes=50)
        writer.start()
        # Once the snapshot is in Delta, Debezium streams: what commits now is no snapshot row.
        wait_until(
            lambda: "snapshot" in delta_txn_ids(table),
            120,
            f"the first driver did not publish the snapshot; stderr {driver.stderr_file}",
        )
        join_first = capture.start_workload("first", first_size, seed=1)
        driver.wait_killed(120)
        published_at_kill = len(delta_txn_ids(table))
        # Written while no driver runs: a large transaction with a primary-key change.
        committed.append(capture.large_transaction(large_size))
        driver.start(max_changes=500)
        committed += join_first(120)
        wait_until(
            lambda: len(delta_txn_ids(table)) > published_at_kill,
            120,
            f"the restarted driver published nothing; stderr {driver.stderr_file}",
        )
        # Written while the restarted driver runs.
        committed += capture.start_workload("second", second_size, seed=2)(120)
        writer.wait_idle(2.0, 120)
        expected = {*committed, "snapshot"}
        wait_until(
            lambda: delta_txn_ids(table) >= expected,
            150,
            f"the restarted driver did not bring all {len(committed)} transactions to Delta; "
            f"stderr {driver.stderr_file}",
        )
        driver.stop(120)
    finally:
        driver.kill()
        writer.close()

    rows = delta_changes(table)
    by_txn = whole_once(rows)
    assert published_at_kill < len(by_txn), "the first driver published everything"
    # The second driver resumed from checkpoint 2 and ran batch 3 again.
    history = HistoryLog(SparkCheckpoint(str(tmp_path / "ckpt")))
    starts = [e for e in history.events() if isinstance(e, StartEvent)]
    assert [(s.restored, s.rerun_batch) for s in starts] == [
        (None, None),
        (KILL_BATCH - 1, KILL_BATCH),
    ]
    # The snapshot is one unit: every account (and nothing streamed) in it.
    snapshot = by_txn.pop("snapshot")
    assert {r["op"] for r in snapshot} == {"r"}
    assert sum(1 for r in snapshot if r["table"] == capture.accounts_table) == ACCOUNTS
    assert sorted(by_txn) == sorted(committed), "a transaction is missing or extra"
    assert max(len(v) for v in by_txn.values()) >= large_size, "the large transaction was not whole"

    # The change log folded by key equals each table, row for row.
    capture.assert_folds_to_tables(rows)
