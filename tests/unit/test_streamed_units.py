"""Large units are built into rows as their events are read, and the rows are the same.

A task keeps a transaction's events until its END; a unit of at least ``STREAM_AT`` changes (a
huge transaction, an initial snapshot of any size) is streamed instead, from what the plan knows
of it. These tests lower the threshold so every unit streams, and compare with buffered reading:
interleaved generated logs (events before BEGIN and after END), gate-off cuts inside units, many
partitions, and the logs Debezium wrote.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_ckpt.sources.debezium import connector as debezium
from spark_ckpt.testing.debezium_log import random_log, write_log

from driver_loop import make_reader, run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"


def delivered(options: dict[str, str]) -> list[tuple[Any, ...]]:
    """Every row the reader delivers until it runs dry, in delivery order."""
    batches, _ = run(make_reader(options), options)
    return [
        tuple(
            row[c]
            for c in (
                "txn_id",
                "txn_order",
                "txn_size",
                "event_index",
                "commit_ts",
                "table",
                "op",
                "key",
                "after",
            )
        )
        for batch in batches
        for row in sorted(batch.rows, key=lambda r: (r["txn_order"], r["event_index"]))
    ]


def both_ways(monkeypatch: pytest.MonkeyPatch, options: dict[str, str]) -> None:
    buffered = delivered(options)
    monkeypatch.setattr(debezium, "STREAM_AT", 1)
    streamed = delivered(options)
    monkeypatch.undo()
    assert streamed == buffered
    assert buffered, "the log delivered nothing: the test proves nothing"


@pytest.mark.parametrize("log", ["postgres-3.6.1", "mariadb-3.5.0"])
@pytest.mark.parametrize("cap", ["1", "5", "1000"])
def test_logs_debezium_wrote_read_the_same_streamed(
    monkeypatch: pytest.MonkeyPatch, log: str, cap: str
) -> None:
    """The snapshot and every transaction stream to the same rows, in small and large batches."""
    options = {
        "connector": "debezium-json",
        "path": str(FIXTURES / log),
        "maxChangesPerTrigger": cap,
        "changesPerPartition": "2",
    }
    both_ways(monkeypatch, options)


@given(seed=st.integers(0, 2**32 - 1), gate=st.sampled_from(["on", "off"]))
def test_interleaved_logs_read_the_same_streamed(seed: int, gate: str) -> None:
    """Interleaved transactions, cut anywhere with the gate off, stream to the same rows."""
    rng = random.Random(seed)
    records, _ = random_log(rng, 12, max_size=9, interleave=4)
    with pytest.MonkeyPatch.context() as monkeypatch:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            write_log(tmp, records, sorted(rng.sample(range(len(records)), 3)))
            options = {
                "connector": "debezium-json",
                "path": tmp,
                "maxChangesPerTrigger": str(rng.randint(1, 12)),
                "changesPerPartition": str(rng.randint(1, 6)),
                "gate": gate,
            }
            both_ways(monkeypatch, options)


def test_the_plan_names_its_large_units_to_the_executors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Units at or above STREAM_AT travel in the partition; smaller ones do not."""
    options = {"connector": "debezium-json", "path": str(FIXTURES / "postgres-3.6.1")}
    reader = make_reader(options)
    start = reader.initialOffset()
    monkeypatch.setattr(debezium, "STREAM_AT", 6)  # the snapshot (7) and the last (6)
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    (partition,) = reader.partitions(start, end)
    streams = partition.value.streams
    assert [(u.txn_id, u.size) for u in streams] == [("snapshot", 7), ("737", 6)]
