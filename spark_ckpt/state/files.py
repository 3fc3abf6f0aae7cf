"""Small file-system helpers shared by the control plane, sources and sinks."""

from __future__ import annotations

import os

from spark_ckpt.errors import InvalidOptionError
from spark_ckpt.state.storage import Location

__all__ = ["local_path", "numbered_files", "write_atomically", "write_if_changed"]


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a part.

    A temporary file in the same directory, fsynced and renamed over ``path`` (see
    :meth:`spark_ckpt.state.storage.Location.write_bytes`), so the new content survives a crash
    once this returns.
    """
    Location(path).write_bytes(data)


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
