"""Property tests: batches hold whole transactions, exactly once, in END order, replayably."""

from __future__ import annotations

import json
import random
import tempfile
from collections import defaultdict
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from spark_ckpt.testing.debezium_log import GeneratedTxn, random_log, write_log

from driver_loop import make_reader, read_batch, run


@st.composite
def logs(draw: st.DrawFn) -> dict[str, Any]:
    """A random interleaved log, its file splits, and a soft cap."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    records, expected = random_log(
        rng,
        draw(st.integers(1, 40)),
        max_size=draw(st.integers(1, 12)),
        interleave=draw(st.integers(1, 6)),
        non_transactional=draw(st.sampled_from([0.0, 0.1, 0.3])),
        end_before_events=draw(st.sampled_from([0.0, 0.3, 0.8])),
    )
    splits = draw(st.lists(st.integers(1, max(1, len(records) - 1)), max_size=8))
    cap = draw(st.one_of(st.none(), st.integers(1, 40)))
    per_partition = draw(st.integers(1, 60))
    return {
        "records": records,
        "expected": expected,
        "splits": splits,
        "cap": cap,
        "per_partition": per_partition,
        "trailing_newline": draw(st.booleans()),
    }


def options_for(directory: str, case: dict[str, Any], gate: str = "on") -> dict[str, str]:
    options = {
        "connector": "debezium-json",
        "path": directory,
        "changesPerPartition": str(case["per_partition"]),
        "gate": gate,
    }
    if case["cap"] is not None:
        options["maxChangesPerTrigger"] = str(case["cap"])
    return options


def notes(rows: list[dict[str, Any]]) -> list[str]:
    return [json.loads(row["after"])["note"] for row in rows]


def expected_notes(expected: list[GeneratedTxn]) -> list[str]:
    return [event["after"]["note"] for txn in expected for event in txn.events]


@given(case=logs())
def test_batches_hold_whole_transactions_exactly_once_in_end_order(case: dict[str, Any]) -> None:
    """Every batch is whole transactions; together they are every transaction once, in END order."""
    with tempfile.TemporaryDirectory() as directory:
        write_log(
            directory,
            case["records"],
            case["splits"],
            trailing_newline=case["trailing_newline"],
        )
        if not case["trailing_newline"]:
            # An empty later file proves the last file finished, so its unterminated tail counts.
            write_log(directory, [], [], first_file=10_000)
        options = options_for(directory, case)
        batches, _ = run(make_reader(options), options)

        for batch in batches:
            by_txn: dict[str, list[int]] = defaultdict(list)
            sizes: dict[str, int] = {}
            for row in batch.rows:
                by_txn[row["txn_id"]].append(row["event_index"])
                sizes[row["txn_id"]] = row["txn_size"]
            for txn_id, indexes in by_txn.items():
                assert indexes == list(range(sizes[txn_id])), f"{txn_id} split: {indexes}"
            cap = case["cap"]
            if cap is not None and len(by_txn) > 1:
                assert len(batch.rows) <= cap, "a multi-transaction batch exceeds the soft cap"

        rows = [row for batch in batches for row in batch.rows]
        assert notes(rows) == expected_notes(case["expected"])
        orders = [row["txn_order"] for row in rows]
        assert orders == sorted(orders)
        assert len({row["txn_order"] for row in rows}) == len(case["expected"])


@given(case=logs())
def test_replaying_any_logged_range_gives_identical_rows(case: dict[str, Any]) -> None:
    """Re-planning and re-reading a logged (start, end) on fresh readers yields the same rows."""
    with tempfile.TemporaryDirectory() as directory:
        write_log(directory, case["records"], case["splits"])
        options = options_for(directory, case)
        batches, _ = run(make_reader(options), options)
        for batch in batches:
            assert read_batch(options, batch.start, batch.end) == batch.rows


@given(case=logs())
def test_gate_off_splits_but_still_delivers_everything_once(case: dict[str, Any]) -> None:
    """With the gate off, batches end anywhere, yet the union is still exact and replayable."""
    with tempfile.TemporaryDirectory() as directory:
        write_log(directory, case["records"], case["splits"])
        options = options_for(directory, case, gate="off")
        batches, _ = run(make_reader(options), options)
        rows = [row for batch in batches for row in batch.rows]
        assert notes(rows) == expected_notes(case["expected"])
        for batch in batches:
            assert read_batch(options, batch.start, batch.end) == batch.rows
            if case["cap"] is not None:
                assert len(batch.rows) <= case["cap"]


@given(case=logs(), cut_points=st.lists(st.integers(0, 400), min_size=1, max_size=5))
def test_growing_log_never_emits_a_partial_transaction(
    case: dict[str, Any], cut_points: list[int]
) -> None:
    """Records appended in steps (files growing, new files) still give whole transactions."""
    records = case["records"]
    steps = sorted({min(p, len(records)) for p in cut_points} | {len(records)})
    with tempfile.TemporaryDirectory() as directory:
        options = options_for(directory, case)
        reader = make_reader(options)
        offset = None
        seen: list[dict[str, Any]] = []
        written = 0
        for number, step in enumerate(steps):
            write_log(directory, records[written:step], [], first_file=number)
            written = step
            batches, offset = run(reader, options, start=offset)
            for batch in batches:
                sizes = defaultdict(int)
                for row in batch.rows:
                    sizes[(row["txn_id"], row["txn_size"])] += 1
                assert all(count == size for (_, size), count in sizes.items())
                seen += batch.rows
        assert notes(seen) == expected_notes(case["expected"])
