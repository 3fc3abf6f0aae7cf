"""Reading an append-only directory of ``*.jsonl`` files as one ordered log of lines.

Files are read in a fixed order (:data:`FileOrder`: file names compared as strings, or
"naturally", with runs of digits compared as numbers); files may grow and new files may appear.
A position is the file name, the byte offset and the number of lines already consumed in that
file, so errors can name ``file:line``. Only whole lines are consumed: the unterminated tail of
the newest file is left until its newline arrives. The tail of an *older* file (a later file
exists) is consumed as a whole line, since nothing more will be appended to it.

Every read works on a :class:`LogFile` listing taken once (names and sizes): a file is read up
to its listed size and never further, so the planner and the executors that replay its plan see
the same bytes whatever is written meanwhile. The listing is what later checks compare against
(see :mod:`.debezium`): data behind the reader's position is refused, never skipped.

The directory is a :class:`~spark_ckpt.state.storage.Location`: a local directory or an
object-store prefix. Pure Python; runs in the driver (planning) and on executors (reading).
"""

from __future__ import annotations

import functools
import queue
import re
import threading
from collections.abc import Generator, Iterator, Sequence
from typing import NamedTuple

from spark_ckpt.errors import LogRewrittenError, SourcePathError, StateFormatError, StorageError
from spark_ckpt.state.storage import Location, StorageNotFoundError

from .options import FILE_ORDERS, FileOrder

__all__ = [
    "FILE_ORDERS",
    "START",
    "FileOrder",
    "LogChunk",
    "LogFile",
    "LogLine",
    "LogPosition",
    "file_key",
    "list_log_files",
    "newest_modified",
    "position_key",
    "read_ahead",
    "read_chunks",
    "read_lines",
]

_SUFFIX = ".jsonl"
_CHUNK = 8 << 20
_DIGITS = re.compile(r"(\d+)")


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
            raise StateFormatError(f"not a log position [file, byte, line]: {value!r}")
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


@functools.lru_cache(maxsize=1 << 16)
def file_key(name: str, order: FileOrder) -> tuple[object, ...]:
    """The sort key of a file name in ``order`` (``""``, before the first file, sorts first).

    Cached: the planner compares every listed file with its position on every trigger, and
    each offset it makes counts the files before it.
    """
    if order == "name":
        return (name,)
    parts: list[object] = [int(p) if i % 2 else p for i, p in enumerate(_DIGITS.split(name))]
    # Strings sit at even indexes and numbers at odd ones, so two keys always compare; the
    # name itself breaks ties between spellings of one number (b09 and b9).
    return (tuple(parts), name)


def position_key(position: LogPosition, order: FileOrder) -> tuple[object, ...]:
    """The sort key of a log position in ``order``."""
    return (file_key(position.file, order), position.byte, position.line)


class LogFile(NamedTuple):
    """A ``*.jsonl`` file as listed: its name inside the log directory and its size in bytes."""

    name: str
    size: int


def list_log_files(directory: Location, order: FileOrder = "name") -> list[LogFile]:
    """Return the ``*.jsonl`` files in ``directory`` with their sizes, in read order.

    Runs on the driver, once per trigger (and on restore). On an object store a prefix with no
    objects yet is an empty log.

    Raises
    ------
    SourcePathError
        When the directory is missing, not a directory or unreadable.
    """
    where = directory.url
    try:
        if directory.is_local:
            info = directory.info()
            if info.type.name == "NotFound":
                raise SourcePathError(
                    f"the change-log directory {where!r} does not exist: create it (it may "
                    f"start empty) or fix option 'path'"
                )
            if info.type.name == "File":
                raise SourcePathError(
                    f"option 'path' must name a directory of *.jsonl files, but {where!r} is a file"
                )
        entries = directory.list()
    except StorageError as e:
        raise SourcePathError(
            f"the change-log directory {where!r} is not readable by this process: grant read "
            f"permission ({e})"
        ) from e
    files = [
        LogFile(e.name, e.size)
        for e in entries
        if e.name.endswith(_SUFFIX) and not e.name.startswith(".")
    ]
    return sorted(files, key=lambda f: file_key(f.name, order))


def newest_modified(directory: Location, names: Sequence[str]) -> str | None:
    """The most recently modified of ``names`` (for error messages; driver, rarely)."""
    wanted = set(names)
    stamps = [(e.mtime_ns, e.name) for e in directory.list() if e.name in wanted]
    return max(stamps)[1] if stamps else None


class LogChunk(NamedTuple):
    """Whole lines of one file, read in one piece, and where they start.

    Attributes
    ----------
    start
        Position before the first line.
    data
        The lines, each ending with a newline, except a last one when ``tail_is_line``.
    tail_is_line
        The file's unterminated last line is a whole line: a later file exists, so nothing more
        will be appended to it.
    lines
        How many lines ``data`` holds.
    """

    start: LogPosition
    data: bytes
    tail_is_line: bool
    lines: int

    @property
    def end(self) -> LogPosition:
        """Position after the last line."""
        file, byte, line = self.start
        return LogPosition(file, byte + len(self.data), line + self.lines)


def read_chunks(
    directory: Location,
    files: Sequence[LogFile],
    start: LogPosition,
    stop: LogPosition | None = None,
    order: FileOrder = "name",
) -> Generator[LogChunk, None, None]:
    """Yield the whole lines from ``start`` onwards, in log order, in chunks of up to 8 MiB.

    Runs on the driver and on executors. Each file is read up to its listed size, never
    further: bytes written after the listing belong to a later listing. The newest file's
    unterminated last line is not yielded (its writer is still appending it).

    Parameters
    ----------
    directory
        The log directory.
    files
        The listing to read (from :func:`list_log_files`, or carried by a partition).
    start
        Where to begin (a position returned earlier, or the log start).
    stop
        Yield only lines that end at or before this position (None: read to the end).
    order
        The log's file order.

    Raises
    ------
    LogRewrittenError
        A listed file is gone or shorter than listed: it was deleted or truncated.
    """
    first = file_key(start.file, order)
    last = None if stop is None else file_key(stop.file, order)
    todo = [f for f in files if file_key(f.name, order) >= first]
    for index, (name, size) in enumerate(todo):
        if last is not None and file_key(name, order) > last:
            return
        byte, line = (start.byte, start.line) if name == start.file else (0, 0)
        path = directory.child(name).url
        if byte > size:
            raise LogRewrittenError(
                f"change-log file {path!r} is {size} bytes long, but "
                f"reading resumes at byte {byte}: it was truncated or rewritten (files may only "
                f"be appended); restore it, or start over with a new checkpointLocation"
            )
        # A later file exists, so nothing more will be appended to this one: its unterminated
        # tail is a whole line (the parser rejects it if it is not JSON).
        closed = index + 1 < len(todo)
        limit = size
        if stop is not None and name == stop.file:
            # Positions sit at line ends, so the bytes before stop hold whole lines, and an
            # unterminated tail only when stop is the end of a closed file.
            limit = min(size, stop.byte)
            closed = closed and limit == size
        if byte >= limit:
            continue
        yield from _file_chunks(directory.child(name), LogPosition(name, byte, line), limit, closed)


def read_ahead(chunks: Generator[LogChunk, None, None]) -> Iterator[LogChunk]:
    """Yield ``chunks`` while a thread reads the next one (driver, once per planning scan).

    The planner's decoding releases the GIL, so reading (an object-store request, or copying
    from the page cache) overlaps it instead of following it. At most one chunk waits ahead;
    an error of the reads is raised here, at the chunk it stopped. Leaving the loop early
    stops the thread after its current read.
    """
    slots: queue.Queue[tuple[LogChunk | None, BaseException | None]] = queue.Queue(maxsize=1)
    closed = threading.Event()

    def offer(item: tuple[LogChunk | None, BaseException | None]) -> bool:
        while not closed.is_set():
            try:
                slots.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if not offer((chunk, None)):
                    return
            offer((None, None))
        except BaseException as error:  # handed to the consumer, which raises it
            offer((None, error))
        finally:
            chunks.close()

    reader = threading.Thread(target=produce, name="spark-ckpt-log-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            chunk, error = slots.get()
            if error is not None:
                raise error
            if chunk is None:
                return
            yield chunk
    finally:
        closed.set()
        reader.join()


def _file_chunks(
    target: Location, start: LogPosition, limit: int, closed: bool
) -> Generator[LogChunk, None, None]:
    path = target.url
    deleted = (
        f"change-log file {path!r} was deleted after it was listed for reading: the changes in "
        f"it would be skipped. Files of the log may only be appended or added; restore the "
        f"file, or start over with a new checkpointLocation"
    )
    try:
        handle = target.open_input()
    except StorageError as e:
        if not target.exists():
            raise LogRewrittenError(deleted) from e
        raise SourcePathError(f"cannot read change-log file {path!r}: {e}") from e
    try:
        handle.seek(start.byte)
        pending = b""
        position = start
        remaining = limit - start.byte
        while remaining > 0:
            chunk = bytes(handle.read(min(_CHUNK, remaining)))
            if not chunk:
                raise LogRewrittenError(
                    f"change-log file {path!r} has only {limit - remaining} bytes, but it "
                    f"was listed with at least {limit}: it was truncated or rewritten (files may "
                    f"only be appended); restore it, or start over with a new checkpointLocation"
                )
            remaining -= len(chunk)
            data = pending + chunk if pending else chunk
            tail = remaining == 0 and closed and not data.endswith(b"\n")
            cut = len(data) if tail else data.rfind(b"\n") + 1
            pending = data[cut:]
            if cut:
                whole = data[:cut] if pending else data
                lines = whole.count(b"\n") + tail
                piece = LogChunk(position, whole, tail, lines)
                position = piece.end
                yield piece
    except StorageNotFoundError as e:
        # On an object store the open does not hold the file: a read after it finds it gone.
        raise LogRewrittenError(deleted) from e
    except StorageError as e:
        raise SourcePathError(f"cannot read change-log file {path!r}: {e}") from e
    finally:
        handle.close()


def read_lines(
    directory: Location,
    files: Sequence[LogFile],
    start: LogPosition,
    stop: LogPosition | None = None,
    order: FileOrder = "name",
) -> Iterator[LogLine]:
    """Yield whole lines from ``start`` onwards, one by one (see :func:`read_chunks`).

    For tools and tests: the connector itself hands whole chunks to its native decoder.
    """
    for chunk in read_chunks(directory, files, start, stop, order):
        name, byte, line = chunk.start
        parts = chunk.data.split(b"\n")
        if not chunk.tail_is_line:
            parts.pop()  # the empty piece after the last newline
        for data in parts:
            end = min(byte + len(data) + 1, chunk.end.byte)
            begin = LogPosition(name, byte, line)
            byte, line = end, line + 1
            yield LogLine(begin, LogPosition(name, byte, line), data)
