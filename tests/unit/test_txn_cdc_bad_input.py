"""Bad input: a typed error naming the file and line (or option and value), nothing partial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spark_ckpt.errors import (
    ChangeLogError,
    ConfigError,
    DuplicateTransactionError,
    EventCountMismatchError,
    InvalidOptionError,
    MalformedEventError,
    SourcePathError,
    UnknownOperationError,
    UnknownOptionError,
)

from driver_loop import make_reader, run
from log_records import begin, change, end, write_lines


def options(directory: Path, **extra: str) -> dict[str, str]:
    return {"connector": "debezium-json", "path": str(directory), **extra}


def run_rows(opts: dict[str, str]) -> list[dict[str, Any]]:
    batches, _ = run(make_reader(opts), opts)
    return [row for batch in batches for row in batch.rows]


def first_batch_error(directory: Path) -> ChangeLogError:
    opts = options(directory)
    with pytest.raises(ChangeLogError) as info:
        run_rows(opts)
    return info.value


GOOD = [begin("a"), change("a", 1), change("a", 2), end("a", 2)]


@pytest.mark.parametrize(
    ("bad_line", "error", "problem"),
    [
        ("{not json", MalformedEventError, "not valid JSON"),
        ("[1, 2]", MalformedEventError, "JSON list is not an event object"),
        ('{"hello": "world"}', MalformedEventError, "neither 'op'"),
        (json.dumps(change("b", 1, op="x")), UnknownOperationError, "unknown op 'x'"),
        ('{"status": "END", "id": "b"}', MalformedEventError, "no valid event_count"),
        ('{"status": "BEGIN"}', MalformedEventError, "without a transaction id"),
    ],
)
def test_malformed_line_names_file_and_line(
    tmp_path: Path, bad_line: str, error: type[ChangeLogError], problem: str
) -> None:
    """A bad line stops the query with its file, line and what was expected."""
    write_lines(tmp_path / "log", "0001.jsonl", [*GOOD, bad_line])
    failure = first_batch_error(tmp_path / "log")
    assert isinstance(failure, error)
    assert (failure.file, failure.line) == ("0001.jsonl", 5)
    assert problem in str(failure)
    assert str(failure).startswith("0001.jsonl:5: ")
    assert "Expected" in str(failure)


def test_end_with_fewer_events_than_already_read(tmp_path: Path) -> None:
    """END's event_count below the events seen is reported at the END line."""
    write_lines(
        tmp_path / "log", "0001.jsonl", [begin("a"), change("a", 1), change("a", 2), end("a", 1)]
    )
    failure = first_batch_error(tmp_path / "log")
    assert isinstance(failure, EventCountMismatchError)
    assert (failure.file, failure.line) == ("0001.jsonl", 4)
    assert "event_count=1" in str(failure)


def test_event_after_a_full_transaction_is_reported(tmp_path: Path) -> None:
    """An extra event beyond END's count, in a later file, is reported where it is."""
    write_lines(tmp_path / "log", "0001.jsonl", [begin("a"), end("a", 2), change("a", 1)])
    write_lines(tmp_path / "log", "0002.jsonl", [change("a", 2), change("a", 3)])
    # 'a' completes with its second event, so the third looks like a reused id.
    failure = first_batch_error(tmp_path / "log")
    assert isinstance(failure, DuplicateTransactionError)
    assert (failure.file, failure.line) == ("0002.jsonl", 2)


def test_total_order_beyond_event_count(tmp_path: Path) -> None:
    """A total_order larger than END's event_count is a count mismatch."""
    write_lines(tmp_path / "log", "0001.jsonl", [begin("a"), end("a", 2), change("a", 5)])
    failure = first_batch_error(tmp_path / "log")
    assert isinstance(failure, EventCountMismatchError)
    assert "total_order=5" in str(failure)


def test_data_collections_must_match_events_per_table(tmp_path: Path) -> None:
    """END's per-table counts are checked once the transaction is complete."""
    bad_end = {
        "status": "END",
        "id": "a",
        "event_count": 1,
        "data_collections": [{"data_collection": "public.other", "event_count": 1}],
    }
    write_lines(tmp_path / "log", "0001.jsonl", [begin("a"), change("a", 1), bad_end])
    failure = first_batch_error(tmp_path / "log")
    assert isinstance(failure, EventCountMismatchError)
    assert "data_collections" in str(failure)


@pytest.mark.parametrize(
    ("records", "line", "problem"),
    [
        ([begin("a"), change("a", 1), end("a", 2), begin("a")], 4, "BEGIN of transaction"),
        ([begin("a"), end("a", 1), end("a", 1)], 3, "second END"),
        # A BEGIN of an emitted id may be Debezium's repeat: its first event (without a source
        # position to compare) decides, and the error names the BEGIN.
        ([*GOOD, begin("a"), change("a", 3)], 5, "already complete"),
        ([*GOOD, change("a", 3)], 5, "already complete"),
    ],
)
def test_duplicate_transaction_id(
    tmp_path: Path, records: list[object], line: int, problem: str
) -> None:
    """A transaction id begun, ended or written to again is a typed error at that line."""
    write_lines(tmp_path / "log", "0001.jsonl", records)
    failure = first_batch_error(tmp_path / "log")
    assert isinstance(failure, DuplicateTransactionError)
    assert failure.line == line
    assert problem in str(failure)


def test_nothing_after_the_last_complete_transaction_is_emitted(tmp_path: Path) -> None:
    """Complete transactions before a bad line may be emitted; nothing from the bad region is."""
    write_lines(tmp_path / "log", "0001.jsonl", [*GOOD, begin("b"), change("b", 1)])
    rows = run_rows(options(tmp_path / "log"))
    assert {row["txn_id"] for row in rows} == {"a"}


def test_missing_path(tmp_path: Path) -> None:
    """A missing directory fails when the reader is created, naming the path."""
    with pytest.raises(SourcePathError, match="does not exist"):
        make_reader(options(tmp_path / "missing"))


@pytest.mark.parametrize(
    ("extra", "error", "needle"),
    [
        ({"maxChangesPerTriger": "10"}, UnknownOptionError, "Did you mean 'maxChangesPerTrigger'"),
        ({"fileorder": "numeric"}, InvalidOptionError, "name, natural"),
        ({"dsn": "postgresql://h/db"}, InvalidOptionError, "debezium-json connector does not"),
        ({"maxChangesPerTrigger": "0"}, InvalidOptionError, "a positive integer"),
        ({"maxChangesPerTrigger": "ten"}, InvalidOptionError, "'ten'"),
        ({"changesPerPartition": "-5"}, InvalidOptionError, "a positive integer"),
        ({"softDeclineTimeout": "soon"}, InvalidOptionError, "10min"),
        ({"gate": "maybe"}, InvalidOptionError, "on, off"),
        ({"connector": "mongodb"}, InvalidOptionError, "debezium-json, kafka, mysql, postgres"),
        ({"kafka.bootstrap.servers": "b:9092"}, InvalidOptionError, "debezium-json connector does"),
    ],
)
def test_bad_options_name_option_value_and_accepted(
    tmp_path: Path, extra: dict[str, str], error: type[ConfigError], needle: str
) -> None:
    """Unknown options and bad values are ConfigErrors that say what is accepted."""
    (tmp_path / "log").mkdir()
    with pytest.raises(error) as info:
        make_reader(options(tmp_path / "log", **extra))
    assert needle in str(info.value)


def test_connector_and_path_are_required(tmp_path: Path) -> None:
    """Missing required options say which option and how to give it."""
    with pytest.raises(ConfigError, match="needs the option 'connector'"):
        make_reader({"path": str(tmp_path)})
    with pytest.raises(ConfigError, match="needs the option 'path'"):
        make_reader({"connector": "debezium-json"})
