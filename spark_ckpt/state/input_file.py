"""A random-access reader of one file of a location, whose every call translates store errors.

Runs on the driver and on executors, wherever a :class:`~spark_ckpt.state.storage.Location` is
opened for reading.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["InputFile"]


class InputFile:
    """A random-access reader of one file (object) whose every call translates store errors.

    Returned by :meth:`~spark_ckpt.state.storage.Location.open_input`, with the location's
    translation of read errors (``reading``); runs wherever that is called (driver or executor).
    pyarrow accepts it wherever it takes a file (``pa.ipc.open_file``, ``pq.ParquetFile``) and
    reads through :meth:`read_buffer`, without a copy. A read of an object deleted after the open
    raises :class:`~spark_ckpt.errors.StorageNotFoundError`; any other failure a
    :class:`~spark_ckpt.errors.StorageError` naming the location. Not picklable (it holds an
    open connection); pass the :class:`~spark_ckpt.state.storage.Location` instead.
    """

    def __init__(
        self, reading: Callable[[], AbstractContextManager[None]], handle: pa.NativeFile
    ) -> None:
        self._reading = reading
        self._handle = handle

    @property
    def closed(self) -> bool:
        """True once closed."""
        return bool(self._handle.closed)

    def readable(self) -> bool:
        """Always True."""
        return True

    def seekable(self) -> bool:
        """Always True (random access)."""
        return True

    def writable(self) -> bool:
        """Always False."""
        return False

    def size(self) -> int:
        """The file's size in bytes."""
        with self._reading():
            return int(self._handle.size())

    def tell(self) -> int:
        """The current position."""
        with self._reading():
            return int(self._handle.tell())

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move to ``offset`` (from the start, the position or the end: ``whence`` 0, 1, 2)."""
        with self._reading():
            return int(self._handle.seek(offset, whence))

    def read(self, nbytes: int | None = None) -> bytes:
        """Up to ``nbytes`` bytes from the position (all the rest when None); b"" at the end."""
        with self._reading():
            return bytes(self._handle.read(nbytes))

    def read_buffer(self, nbytes: int | None = None) -> pa.Buffer:
        """As :meth:`read`, as an Arrow buffer (what pyarrow's readers call)."""
        with self._reading():
            return self._handle.read_buffer(nbytes)

    def close(self) -> None:
        """Close the reader (a store error at the close is translated too)."""
        with self._reading():
            self._handle.close()

    def __enter__(self) -> InputFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
