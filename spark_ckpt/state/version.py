"""The installed distribution's version: what savepoints record and ``--version`` prints.

One source of truth, the version ``pyproject.toml`` gave the installed distribution, looked up
on first use (the lookup scans every distribution on the path, a few tenths of a second of CPU,
which the Python processes Spark starts should not pay at import).
"""

from __future__ import annotations

import functools

__all__ = ["installed_version"]


@functools.cache
def installed_version() -> str:
    """The installed ``spark-ckpt``'s version; ``0+unknown`` in a source tree never installed.

    Runs where it is asked, once per process.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spark-ckpt")
    except PackageNotFoundError:
        return "0+unknown"
