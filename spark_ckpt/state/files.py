"""Small file-system helpers shared by the control plane, sources and sinks."""

from __future__ import annotations

import contextlib
import os
import tempfile

from spark_ckpt.errors import InvalidOptionError

__all__ = ["local_path", "numbered_files", "write_atomically", "write_if_changed"]


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a part.

    Writes a temporary file in the same directory, fsyncs it, renames it over ``path`` and
    fsyncs the directory, so the new content survives a crash once this returns.
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_if_changed(path: str, data: bytes) -> None:
    """:func:`write_atomically`, skipped when ``path`` already holds exactly ``data``."""
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return
    except FileNotFoundError:
        pass
    write_atomically(path, data)


def numbered_files(directory: str, suffix: str = "") -> list[int]:
    """The N of every file ``<N><suffix>`` in ``directory``, ascending ([] when it is missing).

    Spark's ``offsets/N`` and ``commits/N``, manifests ``N.json``, hook records ``N.json``.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    stems = (name[: len(name) - len(suffix)] for name in names if name.endswith(suffix))
    return sorted(int(stem) for stem in stems if stem.isdigit())


def local_path(option: str, raw: str) -> str:
    """A local path from a path or ``file:`` URI given as ``option``; other schemes are refused.

    Raises
    ------
    InvalidOptionError
        For a URI of another scheme (``s3://...``): spark-ckpt reads and writes local (or
        mounted) file systems only.
    """
    if raw.startswith("file://"):
        return raw[len("file://") :]
    if raw.startswith("file:"):
        return raw[len("file:") :]
    if "://" in raw:
        raise InvalidOptionError(
            option, raw, "a local (or mounted) path or a file: URI; object stores are not supported"
        )
    return raw
