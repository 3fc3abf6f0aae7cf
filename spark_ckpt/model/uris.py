"""Which locations spark-ckpt can reach, decided from the URI's text alone (pure).

The storage layer (:mod:`spark_ckpt.state.storage`) reaches them; options check a location
with :func:`check_uri` when they are parsed, without importing it (options are data: they
import no runtime code). Runs on the driver and on executors.
"""

from __future__ import annotations

from spark_ckpt.errors import StorageError

__all__ = ["SCHEMES", "check_uri", "split_uri"]

SCHEMES = ("file", "s3", "s3a", "gs", "gcs", "abfs", "abfss", "az")
"""The schemes a location may have (``file`` for a path without one)."""


def split_uri(uri: str) -> tuple[str, str]:
    """``(scheme, rest)`` of a location's URI; a path without a scheme is local."""
    if "://" not in uri:
        if uri.startswith("file:"):
            return "file", uri[len("file:") :]
        return "file", uri
    scheme, _, rest = uri.partition("://")
    return scheme.lower(), rest


def check_uri(uri: str) -> str:
    """``uri`` when it names a path with a scheme a store here supports.

    Raises
    ------
    StorageError
        For another scheme (the message names it and the supported ones), or no path.
    """
    scheme, rest = split_uri(uri)
    if scheme not in SCHEMES:
        raise StorageError(
            f"{uri!r} has the scheme {scheme!r}, which spark-ckpt cannot read or write; "
            f"use a local path or one of: " + ", ".join(f"{s}://" for s in SCHEMES[1:])
        )
    if not rest.strip("/"):
        raise StorageError(f"{uri!r} names no path")
    return uri
