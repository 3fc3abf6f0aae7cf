"""The reader reports held-back data on every trigger, warns, and escalates a stall (no JVM)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from spark_ckpt import SnapshotAvailability
from spark_ckpt.model.availability import AVAILABLE
from spark_ckpt.model.held_back import WARN_AFTER, WARN_EVERY
from spark_ckpt.sources.connector import ChangeConnector, Plan, PlannedBatch
from spark_ckpt.sources.gate import Cut
from spark_ckpt.sources.options import SOFT_DECLINE_TIMEOUT, SourceOptions
from spark_ckpt.sources.reader import TxnCdcStreamReader, make_connector

from log_records import begin, change, end, txn, write_lines

OLDEST = "transaction 'T1' (first record 0001.jsonl:1)"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Holding(ChangeConnector):
    """Always one complete unit of 2 changes, plus ``held`` changes of T1 held back."""

    name = "holding"

    def __init__(self) -> None:
        self.held = 3
        self.batches = 0

    def initial_offset(self) -> dict[str, Any]:
        return {"v": 1, "checkpoint": -1}

    def plan(self, start: dict[str, Any], max_changes: int | None) -> Plan:
        waits = SnapshotAvailability.soft_failure("T1 waits for its END")
        return Plan([2], waits, self.held, held_units=1, oldest_held=OLDEST)

    def availability(self, cut: Cut) -> SnapshotAvailability:
        return AVAILABLE

    def batch(self, cut: Cut, checkpoint_id: int) -> PlannedBatch:
        self.batches += 1
        return PlannedBatch({"v": 1, "checkpoint": checkpoint_id}, [])

    def replan(self, start: dict[str, Any], end: dict[str, Any]) -> list[object]:
        return []

    def read(self, partition: object) -> Iterator[Any]:
        return iter(())


def holding_reader(clock: FakeClock, **extra: str) -> tuple[TxnCdcStreamReader, Holding]:
    connector = Holding()
    options = SourceOptions.parse({"connector": "debezium-json", "path": "/nowhere", **extra})
    return TxnCdcStreamReader(options, connector, clock=clock), connector


def debezium_reader(log: Path, clock: FakeClock) -> TxnCdcStreamReader:
    options = SourceOptions.parse({"connector": "debezium-json", "path": str(log)})
    return TxnCdcStreamReader(options, make_connector(options), clock=clock)


def test_soft_decline_timeout_defaults_to_five_minutes_and_accepts_unlimited() -> None:
    """A stuck query fails within minutes by default; unlimited keeps the old behaviour."""
    base = {"connector": "debezium-json", "path": "/nowhere"}
    assert SourceOptions.parse(base).soft_decline_timeout == SOFT_DECLINE_TIMEOUT == 300
    unlimited = SourceOptions.parse({**base, "softDeclineTimeout": "unlimited"})
    assert unlimited.soft_decline_timeout == float("inf")


def test_held_back_data_is_reported_on_a_trigger_that_cuts(tmp_path: Path) -> None:
    """A batch is cut before the open transaction; heldBack still names it, from the real log."""
    log = tmp_path / "log"
    write_lines(log, "0001.jsonl", [*txn("a", 2), begin("b"), change("b", 1)])
    reader = debezium_reader(log, FakeClock())
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) != start
    report = reader.reportLatestOffset()
    assert report["decline"] is None
    held = report["heldBack"]
    assert (held["changes"], held["transactions"]) == (1, 1)
    # Lines are counted from 0, as in the connector's other messages.
    assert held["oldest"] == "transaction 'b' (first record 0001.jsonl:5)"
    assert held["sinceMs"] == 1_000_000
    assert "END has not been read" in held["reason"]


def test_nothing_held_back_reports_null(tmp_path: Path) -> None:
    """A log of complete transactions holds nothing back."""
    log = tmp_path / "log"
    write_lines(log, "0001.jsonl", txn("a", 2))
    reader = debezium_reader(log, FakeClock())
    reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert reader.reportLatestOffset()["heldBack"] is None


def test_held_back_data_without_progress_is_declined_hard_even_where_a_cut_is_available() -> None:
    """Past softDeclineTimeout without progress no batch is cut; the reason names the oldest."""
    clock = FakeClock()
    reader, connector = holding_reader(clock)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) != start
    clock.now += SOFT_DECLINE_TIMEOUT
    assert reader.latestOffset(start, ReadAllAvailable()) != start, "at the bound: still cut"
    clock.now += 1
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert connector.batches == 2
    decline = reader.reportLatestOffset()["decline"]
    assert (decline["kind"], decline["escalated"]) == ("hard", True)
    assert decline["reason"] == (
        "held-back data exceeded softDeclineTimeout=5min without progress; the oldest held back "
        f"is {OLDEST}: T1 waits for its END"
    )


def test_progress_of_held_back_data_postpones_escalation() -> None:
    """A held unit that keeps growing is never escalated; once it stops, the bound applies."""
    clock = FakeClock()
    reader, connector = holding_reader(clock, softDeclineTimeout="1min")
    start = reader.initialOffset()
    for _ in range(5):  # 5 minutes held, growing every 50 s
        reader.latestOffset(start, ReadAllAvailable())
        clock.now += 50
        connector.held += 100
    assert reader.latestOffset(start, ReadAllAvailable()) != start
    assert reader.reportLatestOffset()["heldBack"]["heldForMs"] == 250_000
    clock.now += 61
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert reader.reportLatestOffset()["decline"]["kind"] == "hard"


def test_a_transaction_blocking_later_ones_escalates_after_its_last_new_record(
    tmp_path: Path,
) -> None:
    """T1 ended with 2 of its 3 events; transactions queueing behind it do not keep it alive."""
    log = tmp_path / "log"
    write_lines(log, "0001.jsonl", [begin("T1"), change("T1", 1), change("T1", 2), end("T1", 3)])
    clock = FakeClock()
    reader = debezium_reader(log, clock)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert reader.reportLatestOffset()["decline"]["kind"] == "soft"
    for index, name in enumerate(["0002.jsonl", "0003.jsonl"]):
        clock.now += 200
        write_lines(log, name, txn(f"later-{index}", 2))
        assert reader.latestOffset(start, ReadAllAvailable()) == start
    report = reader.reportLatestOffset()
    assert (report["heldBack"]["changes"], report["heldBack"]["transactions"]) == (6, 3)
    decline = report["decline"]
    assert decline["kind"] == "hard", "400 s after T1's last record, past the 5 min bound"
    assert (
        "the oldest held back is transaction 'T1' (first record 0001.jsonl:1)"
        in (decline["reason"])
    )
    assert "only 2 of its 3 change events" in decline["reason"]


def test_the_log_warns_about_held_back_data_at_a_bounded_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One warning once data is held WARN_AFTER seconds, then at most one per WARN_EVERY."""
    clock = FakeClock()
    reader, _ = holding_reader(clock, softDeclineTimeout="unlimited")
    start = reader.initialOffset()
    with caplog.at_level(logging.WARNING, logger="spark_ckpt.sources.reader"):
        for at in [0, WARN_AFTER / 2, WARN_AFTER + 1, WARN_AFTER + 5, WARN_AFTER + WARN_EVERY + 1]:
            clock.now = 1000.0 + at
            reader.latestOffset(start, ReadAllAvailable())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert warnings[0] == (
        f"txn-cdc (holding): 3 change(s) held back in 1 open transaction for 31s; the oldest is "
        f"{OLDEST} (last progress 31s ago): T1 waits for its END"
    )
