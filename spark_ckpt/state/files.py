"""Writes into the control plane's driver-local state directory (never a user's location).

The control plane keeps small files in a private temporary directory on the driver (see
:mod:`spark_ckpt.state.registry`); users' locations go through :mod:`spark_ckpt.state.storage`.
"""

from __future__ import annotations

from spark_ckpt.state.storage import Location

__all__ = ["write_atomically", "write_if_changed"]


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a part.

    A temporary file in the same directory, fsynced and renamed over ``path`` (see
    :meth:`spark_ckpt.state.storage.Location.write_bytes`), so the new content survives a crash
    once this returns.
    """
    Location(path).write_bytes(data)


def write_if_changed(path: str, data: bytes) -> None:
    """:func:`write_atomically`, skipped when ``path`` already holds exactly ``data``."""
    target = Location(path)
    if target.read_bytes() != data:
        target.write_bytes(data)
