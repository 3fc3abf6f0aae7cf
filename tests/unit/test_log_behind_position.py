"""Data behind the reader's position is delivered in log order or refused, never skipped.

Each test drives a real reader in Spark's call order (no JVM) and changes the log between
triggers the way a misbehaving producer would.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from spark_ckpt.errors import LogOrderError, LogRewrittenError, RestoreError
from spark_ckpt.sources.reader import TxnCdcStreamReader

from driver_loop import make_reader, run
from log_records import text, txn, write_lines


def write(directory: Path, name: str, records: list[object]) -> None:
    write_lines(directory, name, records)


def append(directory: Path, name: str, records: list[object]) -> None:
    with (directory / name).open("a") as handle:
        handle.write(text(records))


def options(directory: Path, **extra: str) -> dict[str, str]:
    return {"connector": "debezium-json", "path": str(directory), **extra}


def txn_ids(reader: TxnCdcStreamReader, opts: dict[str, str], start: Any = None) -> list[str]:
    batches, _ = run(reader, opts, start)
    return [row["txn_id"] for batch in batches for row in batch.rows]


def test_a_new_file_sorting_before_read_files_is_refused_by_name(tmp_path: Path) -> None:
    """b10 after b9 was read sorts first in name order: LogOrderError names b10 and the fix."""
    log = tmp_path / "log"
    write(log, "b9.jsonl", txn("a", 1))
    opts = options(log)
    reader = make_reader(opts)
    batches, offset = run(reader, opts)
    assert [row["txn_id"] for b in batches for row in b.rows] == ["a"]
    write(log, "b10.jsonl", txn("b", 1))
    with pytest.raises(LogOrderError) as info:
        reader.latestOffset(offset, ReadAllAvailable())
    assert info.value.file == "b10.jsonl"
    message = str(info.value)
    assert "sorts before 'b9.jsonl'" in message
    assert "fileOrder=natural" in message
    assert "zero-pad" in message


def test_natural_file_order_delivers_unpadded_numbers_in_write_order(tmp_path: Path) -> None:
    """With fileOrder=natural, b9 then b10 is the log order, whenever each file appears."""
    log = tmp_path / "log"
    write(log, "b9.jsonl", txn("a", 1))
    opts = options(log, fileOrder="natural")
    reader = make_reader(opts)
    batches, offset = run(reader, opts)
    write(log, "b10.jsonl", txn("b", 1))
    write(log, "b11.jsonl", txn("c", 1))
    more, _ = run(reader, opts, offset)
    assert [row["txn_id"] for b in [*batches, *more] for row in b.rows] == ["a", "b", "c"]


def test_a_late_file_from_a_second_writer_is_refused_even_in_natural_order(tmp_path: Path) -> None:
    """A file sorting between two read files is named, whatever the order option."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 1))
    write(log, "0003.jsonl", txn("c", 1))
    opts = options(log, fileOrder="natural")
    reader = make_reader(opts)
    _, offset = run(reader, opts)
    write(log, "0002.jsonl", txn("b", 1))
    with pytest.raises(LogOrderError, match=r"'0002\.jsonl'"):
        reader.latestOffset(offset, ReadAllAvailable())


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda log: append(log, "0001.jsonl", txn("late", 1)), "grew from"),
        (lambda log: (log / "0001.jsonl").write_text(text(txn("a", 1))[:20]), "shrank from"),
        (lambda log: (log / "0001.jsonl").unlink(), "was deleted"),
    ],
    ids=["appended", "truncated", "deleted"],
)
def test_a_read_file_that_changes_behind_the_position_is_refused(
    tmp_path: Path, change: Any, problem: str
) -> None:
    """Growth, truncation or deletion of a file already passed stops the query with its name."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 1))
    write(log, "0002.jsonl", txn("b", 1))
    opts = options(log)
    reader = make_reader(opts)
    _, offset = run(reader, opts)
    change(log)
    with pytest.raises(LogRewrittenError, match=problem) as info:
        reader.latestOffset(offset, ReadAllAvailable())
    assert "0001.jsonl" in str(info.value)


def test_appending_to_the_newest_file_is_the_normal_case(tmp_path: Path) -> None:
    """Lines appended to the file being read are delivered, in order."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 1))
    opts = options(log)
    reader = make_reader(opts)
    first, offset = run(reader, opts)
    append(log, "0001.jsonl", txn("b", 1))
    write(log, "0002.jsonl", txn("c", 1))
    more, _ = run(reader, opts, offset)
    assert [row["txn_id"] for b in [*first, *more] for row in b.rows] == ["a", "b", "c"]


def test_an_older_files_closed_tail_that_grows_is_refused(tmp_path: Path) -> None:
    """An unterminated last line read as whole (a later file existed) must not grow after."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "0001.jsonl").write_text(text(txn("a", 1)).rstrip("\n"))
    write(log, "0002.jsonl", txn("b", 1))
    opts = options(log)
    reader = make_reader(opts)
    batches, offset = run(reader, opts)
    assert [row["txn_id"] for b in batches for row in b.rows] == ["a", "b"]
    with (log / "0001.jsonl").open("a") as handle:
        handle.write("\n")
    with pytest.raises(LogRewrittenError, match=r"0001\.jsonl"):
        reader.latestOffset(offset, ReadAllAvailable())


def test_a_file_added_behind_the_position_while_stopped_is_refused_on_restart(
    tmp_path: Path,
) -> None:
    """After a restart the offset's record of consumed files catches a late file."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 1))
    write(log, "0003.jsonl", txn("c", 1))
    opts = options(log)
    _, offset = run(make_reader(opts), opts)
    write(log, "0002.jsonl", txn("b", 1))
    os.utime(log / "0002.jsonl")
    restarted = make_reader(opts)
    with pytest.raises(LogRewrittenError, match=r"'0002\.jsonl'") as info:
        restarted.latestOffset(offset, ReadAllAvailable())
    assert "1 change-log file(s)" in str(info.value)
    assert "2 file(s)" in str(info.value)


def test_executors_read_the_listing_the_batch_was_planned_from(tmp_path: Path) -> None:
    """A file appearing between planning and reading changes nothing the batch delivers."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 1))
    write(log, "0003.jsonl", txn("c", 1))
    opts = options(log)
    planner = make_reader(opts)
    start = planner.initialOffset()
    end = planner.latestOffset(start, ReadAllAvailable())
    partitions = planner.partitions(start, end)
    write(log, "0002.jsonl", txn("b", 1))  # a second writer, late
    rows = [
        row
        for partition in partitions
        for batch in make_reader(opts).read(partition)
        for row in batch.to_pylist()
    ]
    assert [row["txn_id"] for row in rows] == ["a", "c"]
    with pytest.raises(LogOrderError, match=r"'0002\.jsonl'"):
        planner.latestOffset(end, ReadAllAvailable())


def test_a_logged_batch_replanned_over_a_changed_log_is_refused(tmp_path: Path) -> None:
    """Re-running a logged batch after a restart checks the files it was planned over."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 1))
    write(log, "0003.jsonl", txn("c", 1))
    opts = options(log)
    planner = make_reader(opts)
    start = planner.initialOffset()
    end = planner.latestOffset(start, ReadAllAvailable())
    write(log, "0002.jsonl", txn("b", 1))
    with pytest.raises(LogRewrittenError, match=r"0002\.jsonl"):
        make_reader(opts).partitions(start, end)


def test_the_file_order_of_a_checkpoint_cannot_change(tmp_path: Path) -> None:
    """Restoring a fileOrder=name checkpoint with fileOrder=natural is refused, not misread."""
    log = tmp_path / "log"
    write(log, "b9.jsonl", txn("a", 1))
    opts = options(log)
    _, offset = run(make_reader(opts), opts)
    natural = make_reader(options(log, fileOrder="natural"))
    with pytest.raises(RestoreError, match="fileOrder=name"):
        natural.latestOffset(offset, ReadAllAvailable())


def test_offsets_without_a_consumed_record_still_restore(tmp_path: Path) -> None:
    """Offsets written before 'consumed' existed resume as before (nothing to check against)."""
    log = tmp_path / "log"
    write(log, "0001.jsonl", txn("a", 1))
    opts = options(log)
    _, offset = run(make_reader(opts), opts)
    old = {k: v for k, v in offset.items() if k != "consumed"}
    write(log, "0002.jsonl", txn("b", 1))
    assert txn_ids(make_reader(opts), opts, old) == ["b"]
