"""Reading an append-only directory of ``*.jsonl`` files as one ordered log of lines.

Files are read in file-name order; files may grow and new files may appear. A position is the
file name, the byte offset and the number of lines already consumed in that file, so errors can
name ``file:line``. Only whole lines are consumed: the unterminated tail of the newest file is
left until its newline arrives. The tail of an *older* file (a later file exists) is consumed
as a whole line, since nothing more will be appended to it.

Pure Python; runs in the driver (planning) and on executors (reading).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple

from spark_ckpt.errors import SourcePathError

__all__ = ["LogLine", "LogPosition", "list_log_files", "read_lines"]

_SUFFIX = ".jsonl"
_CHUNK = 8 << 20


class LogPosition(NamedTuple):
    """A point between two lines of the log; orders by (file, byte).

    Attributes
    ----------
    file
        File name (not path) inside the log directory; ``""`` before the first file.
    byte
        Byte offset in that file of the next unread line.
    line
        Lines of that file already consumed (the next line is ``line + 1``).
    """

    file: str
    byte: int
    line: int

    def to_json(self) -> list[object]:
        """Render as a JSON array ``[file, byte, line]``."""
        return [self.file, self.byte, self.line]

    @classmethod
    def from_json(cls, value: object) -> LogPosition:
        """Parse the JSON array written by :meth:`to_json`."""
        if (
            not isinstance(value, list)
            or len(value) != 3
            or not isinstance(value[0], str)
            or not all(isinstance(v, int) for v in value[1:])
        ):
            raise ValueError(f"not a log position [file, byte, line]: {value!r}")
        return cls(value[0], value[1], value[2])

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


START = LogPosition("", 0, 0)


class LogLine(NamedTuple):
    """One whole line of the log and where it sits.

    Attributes
    ----------
    start
        Position before the line (its 1-based line number is ``start.line + 1``).
    end
        Position after the line.
    data
        The line's bytes without the newline.
    """

    start: LogPosition
    end: LogPosition
    data: bytes

    @property
    def where(self) -> tuple[str, int]:
        """``(file, 1-based line number)`` for error messages."""
        return self.start.file, self.start.line + 1


def list_log_files(directory: str) -> list[str]:
    """Return the ``*.jsonl`` file names in ``directory`` in read order.

    Raises
    ------
    SourcePathError
        When the directory is missing, not a directory or unreadable.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError as e:
        raise SourcePathError(
            f"the change-log directory {directory!r} does not exist: create it (it may start "
            f"empty) or fix option 'path'"
        ) from e
    except NotADirectoryError as e:
        raise SourcePathError(
            f"option 'path' must name a directory of *.jsonl files, but {directory!r} is a file"
        ) from e
    except PermissionError as e:
        raise SourcePathError(
            f"the change-log directory {directory!r} is not readable by this process: "
            f"grant read permission"
        ) from e
    return sorted(n for n in names if n.endswith(_SUFFIX) and not n.startswith("."))


def read_lines(
    directory: str, start: LogPosition, stop: LogPosition | None = None
) -> Iterator[LogLine]:
    """Yield whole lines from ``start`` onwards, in log order.

    Runs on the driver and on executors; every call lists the directory once.

    Parameters
    ----------
    directory
        The log directory.
    start
        Where to begin (a position returned earlier, or the log start).
    stop
        Yield only lines that end at or before this position (None: read to the end).
    """
    files = [n for n in list_log_files(directory) if n >= start.file]
    for index, name in enumerate(files):
        if stop is not None and name > stop.file:
            return
        has_later_file = index + 1 < len(files)
        byte, line = (start.byte, start.line) if name == start.file else (0, 0)
        path = os.path.join(directory, name)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed in the finally below
        except OSError as e:
            raise SourcePathError(f"cannot read change-log file {path!r}: {e.strerror}") from e
        try:
            handle.seek(byte)
            pending = b""
            while True:
                chunk = handle.read(_CHUNK)
                if not chunk:
                    break
                pending += chunk
                parts = pending.split(b"\n")
                pending = parts.pop()
                for data in parts:
                    end_byte = byte + len(data) + 1
                    if stop is not None and name == stop.file and end_byte > stop.byte:
                        return
                    begin = LogPosition(name, byte, line)
                    byte, line = end_byte, line + 1
                    yield LogLine(begin, LogPosition(name, byte, line), data)
            if pending and has_later_file:
                # A later file exists, so nothing more will be appended to this one: its
                # unterminated tail is a whole line (the parser rejects it if it is not JSON).
                end_byte = byte + len(pending)
                if stop is not None and name == stop.file and end_byte > stop.byte:
                    return
                begin = LogPosition(name, byte, line)
                yield LogLine(begin, LogPosition(name, end_byte, line + 1), pending)
            elif pending:
                # The newest file's writer is still appending this line: wait for its newline.
                return
        finally:
            handle.close()
