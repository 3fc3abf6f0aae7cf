"""The debezium-json bad-input matrix: every row is delivered exactly or refused with a typed error.

One row per kind of bad input (the "Bad input" table of ``docs/errors.md``). Each row's log is read
by a real reader in Spark's call order with ``maxChangesPerTrigger=1``, so every complete
transaction before the bad input gets its own batch before the reader reaches it; every batch is
re-planned and read on fresh readers, as after a restart. A row states exactly which transactions
are delivered, and either which typed error stops the query (with its file and line) or which
transaction is held back (a soft decline naming it). No batch may hold part of a transaction.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spark_ckpt.errors import (
    ChangeLogError,
    DuplicateTransactionError,
    EventCountMismatchError,
    MalformedEventError,
    SparkCkptError,
    UnknownOperationError,
)

from driver_loop import make_reader, read_batch
from log_records import begin, change, end, txn


def render(lines: list[object]) -> str:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)


@dataclass(frozen=True)
class Delivered:
    """Every transaction in ``txns`` is delivered whole, in this order; ``held`` waits."""

    txns: list[str]
    held: str | None = None


@dataclass(frozen=True)
class Refused:
    """``txns`` are delivered whole, then the query stops with ``error`` at ``file:line``."""

    txns: list[str]
    error: type[ChangeLogError]
    file: str
    line: int
    problem: str


# Each value: the log's files (name -> lines, joined by newlines; a file ends with a newline
# unless its name is in UNTERMINATED) and the expected outcome.
UNTERMINATED = {"0001-open-tail.jsonl"}
MATRIX: dict[str, tuple[dict[str, list[object]], Delivered | Refused]] = {
    "malformed JSON line": (
        {"0001.jsonl": [*txn("a"), "{not json", *txn("b")]},
        Refused(["a"], MalformedEventError, "0001.jsonl", 5, "not valid JSON"),
    ),
    "older file's last line without newline, whole": (
        {"0001-open-tail.jsonl": txn("a"), "0002.jsonl": txn("b")},
        Delivered(["a", "b"]),
    ),
    "older file's last line without newline, cut short": (
        {"0001-open-tail.jsonl": [*txn("a"), '{"op": "c", "bef'], "0002.jsonl": txn("b")},
        Refused(["a"], MalformedEventError, "0001-open-tail.jsonl", 5, "not valid JSON"),
    ),
    "newest file's last line without newline": (
        {"0001-open-tail.jsonl": [*txn("a"), '{"op": "c", "bef']},
        Delivered(["a"]),  # the writer is still appending: the line waits for its newline
    ),
    "unknown op": (
        {"0001.jsonl": [*txn("a"), change("b", 1, op="x"), end("b", 1)]},
        Refused(["a"], UnknownOperationError, "0001.jsonl", 5, "unknown op 'x'"),
    ),
    "change without a table": (
        {"0001.jsonl": [*txn("a"), change("b", 1, table=None), end("b", 1)]},
        Refused(["a"], MalformedEventError, "0001.jsonl", 5, "names no table"),
    ),
    "END without BEGIN": (
        {"0001.jsonl": [change("a", 1), change("a", 2), end("a", 2), *txn("b")]},
        Delivered(["a", "b"]),  # END and event_count prove the transaction complete
    ),
    "BEGIN without END": (
        {"0001.jsonl": [begin("a"), change("a", 1), *txn("b")]},
        Delivered(["b"], held="'a'"),  # b ended first; a waits for its END
    ),
    # Debezium writes a transaction's END again when it restarts from an offset between the
    # last event and the END (MariaDB's connector with event_count 0, see
    # tests/fixtures/debezium/mariadb-3.5.0): a repeat, dropped.
    "second END for the same id": (
        {"0001.jsonl": [*txn("a"), end("a", 0), *txn("b")]},
        Delivered(["a", "b"]),
    ),
    "a reused id with a new event": (
        {"0001.jsonl": [*txn("a"), change("a", 1)]},
        Refused(["a"], DuplicateTransactionError, "0001.jsonl", 5, "already complete"),
    ),
    "second END before the first completed": (
        {"0001.jsonl": [begin("a"), change("a", 1), end("a", 2), end("a", 2)]},
        Refused([], DuplicateTransactionError, "0001.jsonl", 4, "second END"),
    ),
    "event_count smaller than the events seen": (
        {"0001.jsonl": [*txn("a"), begin("b"), change("b", 1), change("b", 2), end("b", 1)]},
        Refused(["a"], EventCountMismatchError, "0001.jsonl", 8, "event_count=1"),
    ),
    "event_count larger than the events seen": (
        {"0001.jsonl": [begin("a"), change("a", 1), end("a", 3), *txn("b")]},
        Delivered([], held="only 1 of its 3"),  # b ended after a, so it waits behind a
    ),
    "event for a transaction already emitted": (
        {"0001.jsonl": [*txn("a"), change("a", 3)]},
        Refused(["a"], DuplicateTransactionError, "0001.jsonl", 5, "already complete"),
    ),
}


def write_log(directory: Path, files: dict[str, list[object]]) -> None:
    directory.mkdir()
    for name, lines in files.items():
        text = render(lines) + ("" if name in UNTERMINATED else "\n")
        (directory / name).write_text(text)


def deliver(
    opts: dict[str, str],
) -> tuple[list[str], SparkCkptError | None, dict[str, Any] | None]:
    """Run batches until the reader runs dry or fails; check every batch holds whole txns.

    Returns the delivered transaction ids in order, the error (if any) and the last decline.
    """
    reader = make_reader(opts)
    offset = reader.initialOffset()
    delivered: list[str] = []
    try:
        for _ in range(100):
            end_offset = reader.latestOffset(offset, reader.getDefaultReadLimit())
            if end_offset == offset:
                break
            rows = read_batch(opts, offset, end_offset)
            sizes = Counter(row["txn_id"] for row in rows)
            for row in rows:
                assert sizes[row["txn_id"]] == row["txn_size"], f"part of a txn: {row}"
            delivered += list(dict.fromkeys(row["txn_id"] for row in rows))
            offset = end_offset
    except SparkCkptError as e:
        return delivered, e, reader.reportLatestOffset()["decline"]
    return delivered, None, reader.reportLatestOffset()["decline"]


@pytest.mark.parametrize("case", list(MATRIX))
def test_bad_input_is_delivered_exactly_or_refused_where_it_is(tmp_path: Path, case: str) -> None:
    """Each row of the matrix: the exact transactions delivered, then a typed error or a hold."""
    files, expected = MATRIX[case]
    write_log(tmp_path / "log", files)
    opts = {"connector": "debezium-json", "path": str(tmp_path / "log")}
    opts["maxChangesPerTrigger"] = "1"
    delivered, error, decline = deliver(opts)
    assert delivered == expected.txns
    if isinstance(expected, Refused):
        assert isinstance(error, expected.error), f"expected {expected.error}, got {error!r}"
        assert (error.file, error.line) == (expected.file, expected.line)
        assert expected.problem in str(error)
        assert "Expected" in str(error)  # says what a valid record looks like
    else:
        assert error is None, f"unexpected {error!r}"
        if expected.held is None:
            assert decline is None
        else:
            assert decline is not None
            assert decline["kind"] == "soft"
            assert expected.held in decline["reason"]
