"""The native line decoder: what a row holds, byte for byte, and how odd but valid JSON reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_ckpt.errors import MalformedEventError
from spark_ckpt.sources.schema import ARROW_SCHEMA

from driver_loop import make_reader, run
from log_records import begin, change, end, write_lines


def rows_of(directory: Path) -> list[dict[str, Any]]:
    opts = {"connector": "debezium-json", "path": str(directory)}
    batches, _ = run(make_reader(opts), opts)
    return [row for batch in batches for row in batch.rows]


def test_images_are_the_logs_text_without_whitespace_between_tokens(tmp_path: Path) -> None:
    """Numbers keep their spelling, strings keep their bytes (escapes and spaces included)."""
    line = (
        '{ "op" : "u", "key" : { "id" : 1 },\n'.replace("\n", "")
        + '"before": {"id": 1, "price": 12.50, "big": 123456789012345678901234567890},'
        + ' "after": {"id": 1, "note": "a \\"quoted\\" word, \\u00e9 and é", "tags": [ 1 , 2 ]},'
        + ' "source": {"schema": "public", "table": "t", "ts_ms": 5},'
        + ' "transaction": {"id": "a", "total_order": 1}}'
    )
    write_lines(tmp_path / "log", "0001.jsonl", [begin("a"), line, end("a", 1)])
    [row] = rows_of(tmp_path / "log")
    assert row["key"] == '{"id":1}'
    assert row["before"] == '{"id":1,"price":12.50,"big":123456789012345678901234567890}'
    assert row["after"] == '{"id":1,"note":"a \\"quoted\\" word, \\u00e9 and é","tags":[1,2]}'
    assert json.loads(row["after"])["note"] == 'a "quoted" word, é and é'
    assert (row["table"], row["op"], row["txn_id"], row["txn_size"]) == ("public.t", "u", "a", 1)


def test_a_later_duplicate_key_wins_as_in_pythons_json(tmp_path: Path) -> None:
    """Top-level fields read like ``json.loads``: the last occurrence of a key counts."""
    line = json.dumps(change("a", 1))[:-1] + ', "op": "d"}'
    write_lines(tmp_path / "log", "0001.jsonl", [begin("a"), line, end("a", 1)])
    [row] = rows_of(tmp_path / "log")
    assert row["op"] == "d"


def test_null_images_and_a_missing_key_are_sql_nulls(tmp_path: Path) -> None:
    """``before: null`` and no ``key`` are NULL, not the text ``null``."""
    write_lines(tmp_path / "log", "0001.jsonl", [begin("a"), change("a", 1), end("a", 1)])
    [row] = rows_of(tmp_path / "log")
    assert (row["before"], row["key"], row["after"]) == (None, None, '{"id":1}')


def test_bytes_that_are_not_utf8_are_a_malformed_line(tmp_path: Path) -> None:
    """The line and file are named; nothing of the bad transaction is delivered."""
    directory = tmp_path / "log"
    write_lines(directory, "0001.jsonl", [begin("a"), change("a", 1), end("a", 1)])
    with (directory / "0001.jsonl").open("ab") as handle:
        handle.write(b'{"op": "c", "after": "\xff"}\n')
    with pytest.raises(MalformedEventError) as info:
        rows_of(directory)
    assert (info.value.file, info.value.line) == ("0001.jsonl", 4)
    assert "not valid JSON" in str(info.value)


def test_record_batches_have_the_output_schema(tmp_path: Path) -> None:
    """The natively built columns arrive with exactly the declared Arrow types."""
    directory = tmp_path / "log"
    write_lines(directory, "0001.jsonl", [begin("a"), change("a", 1), change("a", 2), end("a", 2)])
    opts = {"connector": "debezium-json", "path": str(directory)}
    reader = make_reader(opts)
    start = reader.initialOffset()
    stop = reader.latestOffset(start, reader.getDefaultReadLimit())
    batches = [
        batch
        for partition in reader.partitions(start, stop)
        for batch in make_reader(opts).read(partition)
    ]
    table = pa.Table.from_batches(batches)
    assert table.schema == ARROW_SCHEMA
    assert table.column("event_index").to_pylist() == [0, 1]
