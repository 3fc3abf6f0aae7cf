"""The reader framework: declines, escalation, read limits and availableNow, without a JVM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from spark_ckpt import SnapshotAvailability
from spark_ckpt.errors import RestoreError
from spark_ckpt.sources.gate import Cut
from spark_ckpt.sources.options import SourceOptions
from spark_ckpt.sources.reader import TxnCdcStreamReader, make_connector

from driver_loop import make_reader, run


def txn(txn_id: str, size: int) -> list[dict[str, Any]]:
    events = [
        {
            "op": "c",
            "before": None,
            "after": {"n": i},
            "source": {"schema": "s", "table": "t", "ts_ms": 5},
            "transaction": {"id": txn_id, "total_order": i + 1, "data_collection_order": i + 1},
        }
        for i in range(size)
    ]
    return [
        {"status": "BEGIN", "id": txn_id},
        *events,
        {"status": "END", "id": txn_id, "event_count": size},
    ]


def write(directory: Path, name: str, records: list[dict[str, Any]]) -> None:
    directory.mkdir(exist_ok=True)
    (directory / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def options(directory: Path, **extra: str) -> dict[str, str]:
    return {"connector": "debezium-json", "path": str(directory), **extra}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_open_transaction_is_held_back_with_a_soft_decline(tmp_path: Path) -> None:
    """Data waiting for an END is not emitted; the decline says which transaction and how much."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 2)[:-1])  # END missing
    opts = options(log)
    reader = make_reader(opts)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    report = reader.reportLatestOffset()
    decline = report["decline"]
    assert decline["kind"] == "soft"
    assert "'a'" in decline["reason"]
    assert "END has not been read" in decline["reason"]
    assert decline["heldChanges"] == 2
    assert decline["checkpoint"] == 0
    assert report["softDeclines"] == 1


def clocked_reader(opts: dict[str, str], clock: FakeClock) -> TxnCdcStreamReader:
    """A reader whose decline and held-back trackers read ``clock``."""
    parsed = SourceOptions.parse(opts)
    return TxnCdcStreamReader(parsed, make_connector(parsed), clock=clock)


def test_soft_decline_escalates_after_soft_decline_timeout(tmp_path: Path) -> None:
    """Holding data back longer than softDeclineTimeout turns the decline hard."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 1)[:-1])
    clock = FakeClock()
    reader = clocked_reader(options(log, softDeclineTimeout="30s"), clock)
    start = reader.initialOffset()
    reader.latestOffset(start, ReadAllAvailable())
    clock.now += 31
    reader.latestOffset(start, ReadAllAvailable())
    decline = reader.reportLatestOffset()["decline"]
    assert decline["kind"] == "hard"
    assert decline["escalated"] is True
    assert decline["heldForMs"] == 31_000


def test_completion_ends_the_decline_and_cuts(tmp_path: Path) -> None:
    """When the END arrives the transaction is cut and the decline clears."""
    log = tmp_path / "log"
    records = txn("a", 2)
    write(log, "0001.jsonl", records[:-1])
    opts = options(log)
    reader = make_reader(opts)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    write(log, "0002.jsonl", records[-1:])
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end != start
    assert end["checkpoint"] == 0
    report = reader.reportLatestOffset()
    assert report["decline"] is None
    assert report["lastCheckpoint"] == 0


def test_idle_source_does_not_decline(tmp_path: Path) -> None:
    """No data at all is idle, not a decline."""
    (tmp_path / "log").mkdir()
    reader = make_reader(options(tmp_path / "log"))
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert reader.reportLatestOffset()["decline"] is None


def test_default_read_limit_is_the_soft_cap(tmp_path: Path) -> None:
    """MaxChangesPerTrigger becomes ReadMaxRows; without it everything is read."""
    (tmp_path / "log").mkdir()
    assert make_reader(options(tmp_path / "log")).getDefaultReadLimit() == ReadAllAvailable()
    capped = make_reader(options(tmp_path / "log", maxChangesPerTrigger="7"))
    assert capped.getDefaultReadLimit() == ReadMaxRows(7)


def test_read_all_available_overrides_the_option(tmp_path: Path) -> None:
    """Spark's ReadAllAvailable means everything, whatever maxChangesPerTrigger says."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 3) + txn("b", 3))
    opts = options(log, maxChangesPerTrigger="3")
    batches, _ = run(make_reader(opts), opts, limit=ReadAllAvailable())
    assert [len(b.rows) for b in batches] == [6]
    batches, _ = run(make_reader(opts), opts)
    assert [len(b.rows) for b in batches] == [3, 3]


def test_available_now_stops_at_the_end_seen_when_prepared(tmp_path: Path) -> None:
    """After prepareForTriggerAvailableNow, data appended later is not read."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 2))
    opts = options(log)
    reader = make_reader(opts)
    reader.prepareForTriggerAvailableNow()
    with (log / "0001.jsonl").open("a") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in txn("b", 2)))
    write(log, "0002.jsonl", txn("c", 1))
    batches, _ = run(reader, opts)
    assert {row["txn_id"] for b in batches for row in b.rows} == {"a"}


def test_is_snapshot_available_answers_for_the_proposed_cut_only(tmp_path: Path) -> None:
    """The FLIP-170 provider answers about the cut proposed for that checkpoint id."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 3))
    reader = make_reader(options(log))
    reader.connector.plan(reader.initialOffset(), None)
    assert reader.is_snapshot_available(0).is_hard  # nothing proposed yet
    assert reader._ask(0, Cut(0, 3, 3, True)).is_available
    inside = reader._ask(0, Cut(0, 1, 1, False))
    assert inside == SnapshotAvailability.soft_failure(
        "the cut would split transaction 'a' after 1 of its 3 change events"
    )
    assert reader.is_snapshot_available(1).is_hard  # a different checkpoint id


def test_offsets_are_stable_json(tmp_path: Path) -> None:
    """Offsets serialise with a fixed key order and round-trip through JSON."""
    log = tmp_path / "log"
    a, b = txn("a", 1), txn("b", 1)
    write(log, "0001.jsonl", [a[0], b[0], *a[1:], b[1]])  # b begins before a ends; b's END missing
    reader = make_reader(options(log))
    end = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    assert list(end) == ["v", "checkpoint", "emitted", "partial", "scan", "consumed", "open"]
    assert json.loads(json.dumps(end)) == end
    begin_b = len(json.dumps(a[0])) + 1
    assert end["open"] == [["b", "0001.jsonl", begin_b, 1]]
    assert end["scan"][2] == 4  # consumed up to and including a's END


def test_restarted_reader_resumes_when_the_log_still_holds_the_offset(tmp_path: Path) -> None:
    """A fresh reader handed a restored offset continues from it (the restore notification)."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 2) + txn("b", 1))
    _, end = run(make_reader(options(log)), options(log))
    write(log, "0002.jsonl", txn("c", 3))
    restarted = make_reader(options(log))
    batches, _ = run(restarted, options(log), start=end)
    assert [row["txn_id"] for batch in batches for row in batch.rows] == ["c", "c", "c"]


def test_restarted_reader_refuses_a_log_truncated_behind_the_offset(tmp_path: Path) -> None:
    """The log lost data past the restored offset: fail clearly instead of skipping it."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 2) + txn("b", 1))
    _, end = run(make_reader(options(log)), options(log))
    write(log, "0001.jsonl", txn("a", 2))  # rewritten shorter
    with pytest.raises(RestoreError, match=r"has only \d+ bytes: it was truncated or rewritten"):
        make_reader(options(log)).latestOffset(end, ReadAllAvailable())
    (log / "0001.jsonl").unlink()
    write(log, "0002.jsonl", txn("c", 1))
    with pytest.raises(RestoreError, match="the file is gone"):
        make_reader(options(log)).partitions(end, end)


def test_an_idle_batch_moves_the_position_and_carries_its_work(tmp_path: Path) -> None:
    """Plan.idle: no unit, yet a batch (a heartbeat, or chunk reads) with its partitions.

    The connector's status is reported with every trigger.
    """
    from spark_ckpt.sources.connector import ChangeConnector, Plan, PlannedBatch
    from spark_ckpt.sources.options import SourceOptions
    from spark_ckpt.sources.reader import TxnCdcStreamReader

    class Idle(ChangeConnector):
        name = "idle"

        def initial_offset(self) -> dict[str, Any]:
            return {"v": 1, "checkpoint": -1, "emitted": 0}

        def plan(self, start: dict[str, Any], max_changes: int | None) -> Plan:
            end = {**start, "checkpoint": start["checkpoint"] + 1, "moved": True}
            return Plan([], None, 0, PlannedBatch(end, ["read a chunk"]))

        def availability(self, cut: Cut) -> SnapshotAvailability:
            raise AssertionError("no unit: nothing to ask about")

        def batch(self, cut: Cut, checkpoint_id: int) -> Any:
            raise AssertionError("no unit: no cut")

        def replan(self, start: dict[str, Any], end: dict[str, Any]) -> list[object]:
            raise AssertionError("the planned batch is used")

        def read(self, partition: object) -> Any:
            return iter(())

        def status(self) -> dict[str, Any]:
            return {"lagBytes": 7}

    write(tmp_path / "log", "0001.jsonl", [])
    reader = TxnCdcStreamReader(SourceOptions.parse(options(tmp_path / "log")), Idle())
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"v": 1, "checkpoint": 0, "emitted": 0, "moved": True}
    assert [p.value for p in reader.partitions(start, end)] == ["read a chunk"]
    report = reader.reportLatestOffset()
    assert report["status"] == {"lagBytes": 7}
    assert report["decline"] is None


def test_the_initial_offset_is_asked_of_the_connector_once_per_run(tmp_path: Path) -> None:
    """Spark asks at every trigger until it logs a first offset; the first answer stays.

    A connector whose answer moves (Kafka's latest offsets, while records arrive), asked again
    after a trigger that planned nothing, would skip what arrived in between. The file
    connector's answer does not move, so the calls are counted.
    """
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 2)[:-1])  # END missing: the first trigger plans nothing
    parsed = SourceOptions.parse(options(log))
    connector = make_connector(parsed)
    answers: list[dict[str, Any]] = []
    resolve = connector.initial_offset

    def moving() -> dict[str, Any]:
        answers.append(resolve())
        return answers[-1]

    connector.initial_offset = moving  # type: ignore[method-assign]
    reader = TxnCdcStreamReader(parsed, connector)
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    write(log, "0002.jsonl", txn("b", 1))
    assert reader.initialOffset() == start
    assert len(answers) == 1
