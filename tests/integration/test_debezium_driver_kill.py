"""The Spark driver SIGKILLed once and restarted while Debezium (PostgreSQL) writes the log.

Debezium's embedded engine (``bench/debezium_writer.py``) captures the test PostgreSQL server
while a workload runs. The query runs in a driver process of its own
(``bench/debezium_harness.py``): the first is killed with its whole session (JVM and Python
workers) once batch 3's manifest is durable and before Spark commits the batch; the second starts
on the same checkpoint, publishes what the first left behind, reads a second workload as it is
written, and drains once everything reached Delta. Each workload transaction logs its own xid in
``txlog``, so every committed transaction can be found in the table under Debezium's transaction
id. The table is read back with delta-rs: this test starts no JVM of its own, one per driver run
only.
"""

from __future__ import annotations

from pathlib import Path

import pg_workload
import psycopg
from changelog_checks import by_key, fold, whole_once
from conftest import wait_until
from debezium_harness import DebeziumDriver, delta_changes, delta_txn_ids
from debezium_postgres import KEYS, debezium_value, exact, large_transaction, writer_for
from pg_cluster import PgCluster

from spark_ckpt.model.events import StartEvent
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog

KILL_BATCH = 3
"""The batch whose manifest is the first driver's last act (batch 0 is the snapshot)."""
ACCOUNTS = 30


def test_a_driver_killed_mid_batch_resumes_and_lands_every_transaction_whole_once(
    pg_server: PgCluster, pg_dsn: str, tmp_path: Path
) -> None:
    """Killed after batch 3's manifest, restarted: each xid in one version, whole; tables fold."""
    pg_workload.create_schema(pg_dsn, accounts=ACCOUNTS)
    writer = writer_for(pg_server, pg_dsn, tmp_path).start()
    table = tmp_path / "table"
    driver = DebeziumDriver(tmp_path / "log", table, tmp_path / "ckpt", tmp_path / "driver")
    committed: list[int] = []
    try:
        # Small batches, so that batch 3 comes while the first workload is still being read.
        driver.start(fault=f"after_manifest:{KILL_BATCH}", max_changes=50)
        wait_until(
            lambda: "snapshot" in delta_txn_ids(table),
            120,
            f"the first driver did not publish the snapshot; stderr {driver.stderr_file}",
        )
        first = pg_workload.Workload(
            pg_dsn, transactions=60, seed=1, accounts=ACCOUNTS, pause=0.05
        ).start()
        driver.wait_killed(120)
        published_at_kill = len(delta_txn_ids(table))
        # Written while no driver runs: a 2,000-row transaction with a primary-key change.
        committed.append(large_transaction(pg_dsn, 2000))
        driver.start(max_changes=500)
        first.join(120)
        committed += first.committed
        wait_until(
            lambda: len(delta_txn_ids(table)) > published_at_kill,
            120,
            f"the restarted driver published nothing; stderr {driver.stderr_file}",
        )
        # Written while the restarted driver runs.
        second = pg_workload.Workload(
            pg_dsn, transactions=40, seed=2, accounts=ACCOUNTS, pause=0.05
        ).start()
        second.join(120)
        committed += second.committed
        writer.wait_idle(2.0, 120)
        expected = {str(xid) for xid in committed} | {"snapshot"}
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
    assert sum(1 for r in snapshot if r["table"] == "public.accounts") == ACCOUNTS
    assert sorted(int(t) for t in by_txn) == sorted(committed), "a transaction is missing or extra"
    assert max(len(v) for v in by_txn.values()) >= 2000, "the large transaction was not whole"

    # The change log folded by key equals each table, row for row.
    state = fold(rows, KEYS, debezium_value)
    with psycopg.connect(pg_dsn) as conn:
        for name, key_columns in KEYS.items():
            cursor = conn.execute(f"SELECT * FROM {name}")
            columns = [d.name for d in cursor.description or ()]
            actual = by_key(columns, cursor.fetchall(), key_columns, lambda _, v: exact(v))
            assert state[name] == actual, f"{name} differs from its folded change log"
