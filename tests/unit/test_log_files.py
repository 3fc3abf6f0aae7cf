"""Reading the append-only log directory."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from harness.servers.s3 import S3Server
from spark_ckpt.errors import LogRewrittenError, SourcePathError
from spark_ckpt.sources.debezium.log_files import (
    START,
    FileOrder,
    LogFile,
    LogLine,
    LogPosition,
    file_key,
    list_log_files,
    read_ahead,
    read_chunks,
    read_lines,
)
from spark_ckpt.state.storage import Location, StorageOptions


def write(path: Path, text: str) -> None:
    path.write_bytes(text.encode())


def lines_from(
    directory: Path, start: LogPosition = START, stop: LogPosition | None = None
) -> list[LogLine]:
    """Read with a fresh listing, as the planner does on every trigger."""
    return list(
        read_lines(Location(str(directory)), list_log_files(Location(str(directory))), start, stop)
    )


def test_files_are_read_in_name_order_ignoring_other_files(tmp_path: Path) -> None:
    """Only *.jsonl files count, in file-name order."""
    write(tmp_path / "b.jsonl", "2\n")
    write(tmp_path / "a.jsonl", "1\n")
    write(tmp_path / "notes.txt", "x\n")
    write(tmp_path / ".hidden.jsonl", "x\n")
    assert list_log_files(Location(str(tmp_path))) == [LogFile("a.jsonl", 2), LogFile("b.jsonl", 2)]
    assert [line.data for line in lines_from(tmp_path)] == [b"1", b"2"]


def test_unterminated_tail_of_newest_file_waits_for_its_newline(tmp_path: Path) -> None:
    """A half-written last line is not consumed until it is complete."""
    log = tmp_path / "a.jsonl"
    write(log, '{"x":1}\n{"x":')
    lines = lines_from(tmp_path)
    assert [line.data for line in lines] == [b'{"x":1}']
    with log.open("ab") as handle:
        handle.write(b"2}\n")
    rest = lines_from(tmp_path, lines[-1].end)
    assert [line.data for line in rest] == [b'{"x":2}']
    assert rest[0].where == ("a.jsonl", 2)


def test_unterminated_tail_of_older_file_is_a_line(tmp_path: Path) -> None:
    """Once a later file exists, an older file's tail without newline is consumed."""
    write(tmp_path / "a.jsonl", '{"x":1}\n{"x":2}')
    write(tmp_path / "b.jsonl", '{"x":3}\n')
    assert [line.data for line in lines_from(tmp_path)] == [
        b'{"x":1}',
        b'{"x":2}',
        b'{"x":3}',
    ]


def test_positions_resume_exactly_and_stop_is_inclusive(tmp_path: Path) -> None:
    """Resuming at a line's end yields the following lines; stop includes lines ending at it."""
    write(tmp_path / "a.jsonl", "1\n2\n")
    write(tmp_path / "b.jsonl", "3\n4\n")
    lines = lines_from(tmp_path)
    assert [line.end for line in lines] == [
        LogPosition("a.jsonl", 2, 1),
        LogPosition("a.jsonl", 4, 2),
        LogPosition("b.jsonl", 2, 1),
        LogPosition("b.jsonl", 4, 2),
    ]
    middle = lines_from(tmp_path, lines[0].end, lines[2].end)
    assert [line.data for line in middle] == [b"2", b"3"]


def test_missing_directory_is_a_source_path_error(tmp_path: Path) -> None:
    """A missing path names itself and how to fix it."""
    missing = str(tmp_path / "nope")
    with pytest.raises(SourcePathError, match="does not exist") as info:
        list_log_files(Location(missing))
    assert missing in str(info.value)
    assert isinstance(info.value, OSError)


def test_file_instead_of_directory_is_a_source_path_error(tmp_path: Path) -> None:
    """Pointing 'path' at a file says it must be a directory."""
    write(tmp_path / "a.jsonl", "1\n")
    with pytest.raises(SourcePathError, match="must name a directory"):
        list_log_files(Location(str(tmp_path / "a.jsonl")))


def test_a_file_is_read_up_to_its_listed_size_only(tmp_path: Path) -> None:
    """Bytes written after the listing wait for the next listing, whatever their timing."""
    write(tmp_path / "a.jsonl", "1\n")
    listing = list_log_files(Location(str(tmp_path)))
    with (tmp_path / "a.jsonl").open("ab") as handle:
        handle.write(b"2\n")
    lines = list(read_lines(Location(str(tmp_path)), listing, START))
    assert [line.data for line in lines] == [b"1"]


def test_a_listed_file_that_shrank_is_a_rewrite(tmp_path: Path) -> None:
    """A file shorter than listed (truncated after planning) is refused, not read short."""
    write(tmp_path / "a.jsonl", "1\n2\n")
    listing = list_log_files(Location(str(tmp_path)))
    write(tmp_path / "a.jsonl", "1\n")
    with pytest.raises(LogRewrittenError, match="truncated or rewritten"):
        list(read_lines(Location(str(tmp_path)), listing, START))


def test_a_listed_file_that_disappeared_is_a_rewrite(tmp_path: Path) -> None:
    """A file deleted between listing and reading is refused, not skipped."""
    write(tmp_path / "a.jsonl", "1\n")
    write(tmp_path / "b.jsonl", "2\n")
    listing = list_log_files(Location(str(tmp_path)))
    (tmp_path / "a.jsonl").unlink()
    with pytest.raises(LogRewrittenError, match="deleted"):
        list(read_lines(Location(str(tmp_path)), listing, START))


def _read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "spark-ckpt-log-read-ahead"]


def test_read_ahead_yields_the_chunks_in_order(tmp_path: Path) -> None:
    for i in range(5):
        write(tmp_path / f"{i:02d}.jsonl", f"{i}a\n{i}b\n")
    directory = Location(str(tmp_path))
    listing = list_log_files(directory)
    plain = list(read_chunks(directory, listing, START))
    assert len(plain) == 5
    assert list(read_ahead(read_chunks(directory, listing, START))) == plain
    assert not _read_ahead_threads(), "the reading thread outlived the loop"


def test_read_ahead_raises_the_reads_error_at_the_chunk_it_stopped(tmp_path: Path) -> None:
    """A file deleted after listing: the chunks before it arrive, then the typed error."""
    write(tmp_path / "a.jsonl", "1\n")
    write(tmp_path / "b.jsonl", "2\n")
    directory = Location(str(tmp_path))
    listing = list_log_files(directory)
    (tmp_path / "b.jsonl").unlink()
    chunks = read_ahead(read_chunks(directory, listing, START))
    assert next(chunks).data == b"1\n"
    with pytest.raises(LogRewrittenError, match="deleted"):
        next(chunks)
    assert not _read_ahead_threads()


def test_leaving_a_read_ahead_early_stops_its_thread(tmp_path: Path) -> None:
    for i in range(20):
        write(tmp_path / f"{i:02d}.jsonl", f"{i}\n")
    directory = Location(str(tmp_path))
    chunks = read_ahead(read_chunks(directory, list_log_files(directory), START))
    assert next(chunks).data == b"0\n"
    chunks.close()  # what breaking out of the planner's loop does
    deadline = time.monotonic() + 10
    while _read_ahead_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _read_ahead_threads(), "the reading thread still runs 10 s after the loop ended"


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ("name", ["b10.jsonl", "b9.jsonl", "c.jsonl"]),
        ("natural", ["b9.jsonl", "b10.jsonl", "c.jsonl"]),
    ],
)
def test_file_order(tmp_path: Path, order: FileOrder, expected: list[str]) -> None:
    """Name order compares strings; natural order compares runs of digits as numbers."""
    for name in ("c.jsonl", "b10.jsonl", "b9.jsonl"):
        write(tmp_path / name, "1\n")
    assert [f.name for f in list_log_files(Location(str(tmp_path)), order)] == expected


def test_natural_order_keys_always_compare() -> None:
    """Keys of names with and without digits compare; padded and unpadded spellings differ."""
    names = ["", "a.jsonl", "a1.jsonl", "a01.jsonl", "a2.jsonl", "a10b.jsonl", "10.jsonl"]
    ordered = sorted(names, key=lambda n: file_key(n, "natural"))
    assert ordered[0] == ""
    assert ordered.index("a2.jsonl") < ordered.index("a10b.jsonl")
    assert ordered.index("a01.jsonl") < ordered.index("a1.jsonl")


def test_a_log_on_s3_is_listed_and_read_like_a_local_one(
    s3_server: S3Server, s3_bucket: str
) -> None:
    """Object-store prefixes are log directories; a prefix without objects is an empty log."""
    log = Location(f"s3://{s3_bucket}/log", StorageOptions.of(s3_server.options()))
    assert list_log_files(log) == []
    log.child("a.jsonl").write_bytes(b'{"x":1}\n{"x":2}\n')
    log.child("b.jsonl").write_bytes(b'{"x":3}\n{"x":')  # the newest file's unterminated tail
    listing = list_log_files(log)
    assert listing == [LogFile("a.jsonl", 16), LogFile("b.jsonl", 13)]
    assert [line.data for line in read_lines(log, listing, START)] == [
        b'{"x":1}',
        b'{"x":2}',
        b'{"x":3}',
    ]
