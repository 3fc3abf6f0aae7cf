"""Reading the append-only log directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_ckpt.errors import SourcePathError
from spark_ckpt.sources.log_files import START, LogPosition, list_log_files, read_lines


def write(path: Path, text: str) -> None:
    path.write_bytes(text.encode())


def test_files_are_read_in_name_order_ignoring_other_files(tmp_path: Path) -> None:
    """Only *.jsonl files count, in file-name order."""
    write(tmp_path / "b.jsonl", "2\n")
    write(tmp_path / "a.jsonl", "1\n")
    write(tmp_path / "notes.txt", "x\n")
    write(tmp_path / ".hidden.jsonl", "x\n")
    assert list_log_files(str(tmp_path)) == ["a.jsonl", "b.jsonl"]
    assert [line.data for line in read_lines(str(tmp_path), START)] == [b"1", b"2"]


def test_unterminated_tail_of_newest_file_waits_for_its_newline(tmp_path: Path) -> None:
    """A half-written last line is not consumed until it is complete."""
    log = tmp_path / "a.jsonl"
    write(log, '{"x":1}\n{"x":')
    lines = list(read_lines(str(tmp_path), START))
    assert [line.data for line in lines] == [b'{"x":1}']
    with log.open("ab") as handle:
        handle.write(b"2}\n")
    rest = list(read_lines(str(tmp_path), lines[-1].end))
    assert [line.data for line in rest] == [b'{"x":2}']
    assert rest[0].where == ("a.jsonl", 2)


def test_unterminated_tail_of_older_file_is_a_line(tmp_path: Path) -> None:
    """Once a later file exists, an older file's tail without newline is consumed."""
    write(tmp_path / "a.jsonl", '{"x":1}\n{"x":2}')
    write(tmp_path / "b.jsonl", '{"x":3}\n')
    assert [line.data for line in read_lines(str(tmp_path), START)] == [
        b'{"x":1}',
        b'{"x":2}',
        b'{"x":3}',
    ]


def test_positions_resume_exactly_and_stop_is_inclusive(tmp_path: Path) -> None:
    """Resuming at a line's end yields the following lines; stop includes lines ending at it."""
    write(tmp_path / "a.jsonl", "1\n2\n")
    write(tmp_path / "b.jsonl", "3\n4\n")
    lines = list(read_lines(str(tmp_path), START))
    assert [line.end for line in lines] == [
        LogPosition("a.jsonl", 2, 1),
        LogPosition("a.jsonl", 4, 2),
        LogPosition("b.jsonl", 2, 1),
        LogPosition("b.jsonl", 4, 2),
    ]
    middle = list(read_lines(str(tmp_path), lines[0].end, stop=lines[2].end))
    assert [line.data for line in middle] == [b"2", b"3"]


def test_missing_directory_is_a_source_path_error(tmp_path: Path) -> None:
    """A missing path names itself and how to fix it."""
    missing = str(tmp_path / "nope")
    with pytest.raises(SourcePathError, match="does not exist") as info:
        list_log_files(missing)
    assert missing in str(info.value)
    assert isinstance(info.value, OSError)


def test_file_instead_of_directory_is_a_source_path_error(tmp_path: Path) -> None:
    """Pointing 'path' at a file says it must be a directory."""
    write(tmp_path / "a.jsonl", "1\n")
    with pytest.raises(SourcePathError, match="must name a directory"):
        list_log_files(str(tmp_path / "a.jsonl"))
