"""Real SIGKILLs of the driver during an incremental snapshot under a live workload."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.faults.postgres_incremental import run_scenario

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.mark.soak
def test_three_kills_during_an_incremental_snapshot_lose_and_repeat_nothing(
    spark: SparkSession, pg_dsn: str, tmp_path: Path
) -> None:
    """20 chunks, killed while reading chunks 5, 10 and 15; the last run finishes.

    One plugin here (pgoutput; the other kill test runs wal2json), for the suite's time budget.

    The table replays exactly, every streamed transaction is whole, each restart resumes after
    the chunks already emitted, and chunk reads stay under twice the table's rows.

    The bound on reads: the three killed batches repeat their reads (2 chunks each), so exactly
    1.3 times the rows is the least; a chunk is also read again whenever a transaction that
    committed before its window raced its read (under this workload, on a loaded machine, 4 of
    the 20 chunks once: 1.5). A restart that went back to the table's start would read at least
    2.8 times the rows (chunks 5, 10 and 15 again), so twice still tells the two apart.
    """
    result = run_scenario(
        spark, pg_dsn, tmp_path, "pgoutput", rows=24_000, chunk_rows=1_200, kills=3
    )
    assert result["differing_rows"] == 0, result
    assert result["pg_rows"] == result["folded_rows"], result
    assert result["broken_transactions"] == 0, result
    assert result["workload_transactions"] > 50, result
    done = [kill["chunks_done"] for kill in result["at_kills"]]
    assert done == sorted(done), f"a restart went back: {result}"
    assert done[-1] > done[0], f"no progress across restarts: {result}"
    assert result["read_ratio"] < 2.0, result
