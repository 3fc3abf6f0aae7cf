"""Units from Debezium's Kafka topics, on records Debezium 3.6.1 wrote through Kafka Connect.

``tests/fixtures/kafka/postgres-3.6.1`` holds every record of every topic
(``bench/capture_kafka_fixture.py``: a snapshot of orders and items, six transactions, an
incremental snapshot of orders in chunks of 2 rows). The items topic has two partitions. The
partitions are fed here in several interleavings: whichever partition is read first, the units
and their order are the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_ckpt.errors import EventCountMismatchError
from spark_ckpt.sources.debezium_format._native import KafkaAssembler

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kafka" / "postgres-3.6.1"

Partition = tuple[str, list[tuple[int, bytes | None]]]


def partitions() -> list[Partition]:
    out = []
    for path in sorted(FIXTURE.glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines() if line]
        topic, _, number = path.stem.rpartition("-")
        values = [
            (r["offset"], None if r["value"] is None else r["value"].encode()) for r in records
        ]
        out.append((f"{topic}/{number}", values))
    return out


def round_robin(parts: list[Partition], block: int) -> Iterator[tuple[int, int]]:
    """``(partition, count)`` feeding steps: ``block`` records of each partition in turn."""
    positions = [0] * len(parts)
    while any(p < len(records) for p, (_, records) in zip(positions, parts, strict=True)):
        for i, (_, records) in enumerate(parts):
            if positions[i] < len(records):
                n = min(block, len(records) - positions[i])
                yield i, n
                positions[i] += n


def one_after_another(parts: list[Partition], first: str) -> Iterator[tuple[int, int]]:
    """Every record of the partitions named ``first``-ish first, then the others, whole."""
    order = sorted(range(len(parts)), key=lambda i: first not in parts[i][0])
    for i in order:
        yield i, len(parts[i][1])


def assemble(
    parts: list[Partition],
    steps: Iterator[tuple[int, int]],
    visible: list[int] | None = None,
    **options: Any,
) -> KafkaAssembler:
    """Feed ``steps`` in one trigger whose target is ``visible`` (default: every record)."""
    assembler = KafkaAssembler(**options)
    for name, _ in parts:
        assembler.add_partition(name, 0)
    assembler.set_target(visible or [len(records) for _, records in parts])
    fed = [0] * len(parts)
    for i, count in steps:
        block = parts[i][1][fed[i] : fed[i] + count]
        fed[i] += count
        nxt = block[-1][0] + 1 if block else fed[i]
        assembler.feed(i, [o for o, _ in block], [v for _, v in block], nxt)
    return assembler


def units(assembler: KafkaAssembler) -> list[tuple[str, str, int]]:
    out = []
    for index in range(len(assembler.unit_sizes())):
        _, kind, key, size, _, _ = assembler.unit(index)
        out.append((kind, key, size))
    return out


EXPECTED = [
    ("snapshot", "snapshot", 6),
    ("transaction", "732", 4),
    ("transaction", "733", 3),
    ("transaction", "734", 2),
    ("transaction", "735", 2),
    ("transaction", "736", 2),
    ("transaction", "737", 1),
    ("transaction", "738", 3),
    ("transaction", "739", 1),
    ("chunk", None, 2),  # orders 1, 4: before the transaction that closes its window (740)
    ("transaction", "740", 1),
    ("transaction", "741", 1),
    ("chunk", None, 2),  # orders 5, 6
    ("transaction", "742", 1),
    ("transaction", "743", 1),
    ("chunk", None, 1),  # orders 30
    ("transaction", "744", 1),
    ("transaction", "745", 1),
    ("transaction", "746", 1),
]


def _same(found: list[tuple[str, str, int]]) -> None:
    assert [(k, None if k == "chunk" else key, n) for k, key, n in found] == EXPECTED


FEEDS: dict[str, Callable[[list[Partition]], Iterator[tuple[int, int]]]] = {
    "round robin, 1 record": lambda p: round_robin(p, 1),
    "round robin, 3 records": lambda p: round_robin(p, 3),
    "transaction topic first": lambda p: one_after_another(p, "transaction"),
    "orders first": lambda p: one_after_another(p, "orders"),
    "items first": lambda p: one_after_another(p, "items"),
}


@pytest.mark.parametrize("feed", sorted(FEEDS))
def test_every_interleaving_gives_the_same_units_in_the_same_order(feed: str) -> None:
    parts = partitions()
    assembler = assemble(parts, FEEDS[feed](parts))
    _same(units(assembler))
    assert assembler.held_events == 0
    assert dict(assembler.skipped())["tombstones"] == 3


def test_a_batch_ends_each_partition_after_its_records_of_the_batch() -> None:
    parts = partitions()
    names = [name for name, _ in parts]
    assembler = assemble(parts, round_robin(parts, 2))
    order_of = {key: order for order, _, key, *_ in map(assembler.unit, range(19))}
    ends = dict(zip(names, assembler.cut(order_of["733"]), strict=True))
    # Through 733: its END (transaction offset 3), orders up to its delete's tombstone (6),
    # items/0 after 732's three inserts, items/1 after 733's delete and its tombstone.
    assert ends == {
        "dbz.public.debezium_signal/0": 0,
        "dbz.public.items/0": 3,
        "dbz.public.items/1": 5,
        "dbz.public.orders/0": 7,
        "dbz.transaction/0": 4,
    }


def test_a_transaction_whose_events_are_not_visible_yet_holds_back_what_follows() -> None:
    parts = partitions()
    # Everything but items/1: 733 (a delete of an item there) cannot be complete.
    steps = [(i, len(records)) for i, (name, records) in enumerate(parts) if "items/1" not in name]
    assembler = assemble(parts, iter(steps))
    assert units(assembler) == []  # the snapshot's rows in items/1 are missing too
    holdup = assembler.holdup()
    assert holdup is not None
    assert "snapshot" in holdup
    assert assembler.held_events > 0


def test_nothing_is_released_before_every_partition_reaches_the_target() -> None:
    parts = partitions()
    names = [name for name, _ in parts]
    items0 = names.index("dbz.public.items/0")
    # Everything is fed but items/0, which the target says holds 6 records: any of them may
    # have been sent before the snapshot's last record.
    steps = [(i, len(records)) for i, (_, records) in enumerate(parts) if i != items0]
    assembler = assemble(parts, iter(steps))
    assert units(assembler) == []
    block = parts[items0][1]
    assembler.feed(items0, [o for o, _ in block], [v for _, v in block], len(block))
    _same(units(assembler))


def test_an_end_with_fewer_events_than_read_is_a_typed_error() -> None:
    parts = partitions()
    txn = next(i for i, (name, _) in enumerate(parts) if "transaction" in name)
    records = list(parts[txn][1])
    offset, value = records[1]  # END of 732: event_count 4
    assert value is not None
    records[1] = (offset, value.replace(b'"event_count":4', b'"event_count":3'))
    parts[txn] = (parts[txn][0], records)
    order = [i for i in range(len(parts)) if i != txn] + [txn]
    with pytest.raises(EventCountMismatchError, match=r"dbz\.transaction/0"):
        assemble(parts, iter((i, len(parts[i][1])) for i in order))


def _segments(assembler: KafkaAssembler, part: int, start: int, end: int) -> list[Any]:
    return assembler.segments(part, start, end)


def test_segments_tell_executors_each_records_unit() -> None:
    parts = partitions()
    names = [name for name, _ in parts]
    assembler = assemble(parts, round_robin(parts, 4))
    orders = names.index("dbz.public.orders/0")
    segments = _segments(assembler, orders, 0, len(parts[orders][1]))
    # The snapshot's 3 rows (events 3-5: its rows in items/1 come first), the transactions'
    # records (with tombstones), then the chunks' rows.
    assert segments[0] == (0, 3, "block", 0, 3, 6)
    assert segments[1][:3] == (3, 12, "txns")
    assert [s[2] for s in segments[2:]] == ["block", "block", "block"]
    items1 = names.index("dbz.public.items/1")
    # The snapshot's rows in items/1 are its events 0-2: every index once.
    assert _segments(assembler, items1, 0, 3)[0] == (0, 3, "block", 0, 0, 6)


def test_a_snapshot_waits_until_records_sent_before_its_last_one_had_time_to_show() -> None:
    """Kafka sends a batch per partition per request: earlier records may show up later."""
    parts = partitions()
    assembler = KafkaAssembler(settle_ms=2000)
    for name, _ in parts:
        assembler.add_partition(name, 0)
    ends = [len(records) for _, records in parts]
    assembler.set_target(ends, 1_500)  # taken 500 ms after every record was sent
    for i, (_, records) in enumerate(parts):
        offsets = [o for o, _ in records]
        assembler.feed(i, offsets, [v for _, v in records], len(records), [1_000] * len(records))
    assert units(assembler) == []  # the snapshot first: nothing before it is released
    holdup = assembler.holdup()
    assert holdup is not None
    assert "snapshot" in holdup
    assembler.set_target(ends, 3_000)  # 2 s after the last record was sent: nothing came
    _same(units(assembler))


# -- transactionTopic=none ----------------------------------------------------------------------


def streamed_changes(parts: list[Partition]) -> set[str]:
    """``<partition>:<offset>`` of every change record outside the initial snapshot."""
    out = set()
    for name, records in parts:
        for offset, value in records:
            payload = json.loads(value)["payload"] if value else None
            if not payload or "op" not in payload:
                continue  # a tombstone, or a BEGIN/END of the transaction topic
            if payload["source"]["snapshot"] in ("false", "incremental"):
                out.add(f"{name}:{offset}")
    return out


@pytest.mark.parametrize("feed", sorted(FEEDS))
def test_without_transactions_each_change_is_its_own_unit_after_the_snapshot(feed: str) -> None:
    """``transactionTopic=none``: Debezium's records still carry a transaction block; ignored.

    The initial snapshot stays one unit (its ``last`` record closes it); every streamed change,
    incremental-snapshot rows too (a chunk is closed only by a transaction's END), is a unit of
    its own, each partition's in offset order. The transaction topic's markers, read when the
    subscription matches it, close nothing.
    """
    parts = partitions()
    assembler = assemble(parts, FEEDS[feed](parts), transactions=False)
    found = units(assembler)
    assert found[0] == ("snapshot", "snapshot", 6)
    changes = found[1:]
    assert {kind for kind, _, _ in changes} == {"change"}
    assert all(size == 1 for _, _, size in changes)
    keys = [key for _, key, _ in changes]
    assert sorted(keys) == sorted(streamed_changes(parts))  # each once, none held back
    assert len(keys) == 30
    for name, _ in parts:
        offsets = [int(k.rpartition(":")[2]) for k in keys if k.rpartition(":")[0] == name]
        assert offsets == sorted(offsets), f"{name} out of its order"
    assert assembler.held_events == 0
    assert assembler.holdup() is None


def test_without_transactions_no_partition_waits_for_the_transaction_topic() -> None:
    """The transaction topic not subscribed to (``subscribe``): nothing waits for an END."""
    parts = [p for p in partitions() if "transaction" not in p[0]]
    without = assemble(parts, round_robin(parts, 2), transactions=False)
    assert len(units(without)) == 1 + 30
    # As the assembler read them before: every change waits in a transaction for an END that
    # is never read, behind the snapshot (issue 42: an availableNow run delivered nothing).
    waiting = assemble(parts, round_robin(parts, 2))
    assert units(waiting) == [("snapshot", "snapshot", 6)]
    assert waiting.held_events == 30
    assert waiting.holdup() is not None


def test_without_transactions_a_batchs_segments_give_each_change_its_own_unit() -> None:
    """Executors build rows from the segments: one block per change, its unit's order."""
    parts = partitions()
    names = [name for name, _ in parts]
    assembler = assemble(parts, round_robin(parts, 3), transactions=False)
    items0 = names.index("dbz.public.items/0")
    segments = _segments(assembler, items0, 0, len(parts[items0][1]))
    assert [s[2] for s in segments] == ["block"] * 6
    assert all(s[1] - s[0] == 1 and s[4] == 0 and s[5] == 1 for s in segments)
    assert len({s[3] for s in segments}) == 6
