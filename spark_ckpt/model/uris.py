"""Which locations spark-ckpt can reach, decided from the URI's text alone (pure).

The storage layer (:mod:`spark_ckpt.state.storage`) reaches them; options check a location
with :func:`check_uri` when they are parsed, without importing it (options are data: they
import no runtime code). Runs on the driver and on executors.
"""

from __future__ import annotations

# posixpath, not os: a path's text is all this module handles (abspath reads the working
# directory, the one piece of process state a relative local path needs).
import posixpath

from spark_ckpt.errors import StorageError

__all__ = ["SCHEMES", "canonical_uri", "check_uri", "child_uri", "split_uri"]

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


def canonical_uri(uri: str) -> str:
    """The canonical form: an absolute local path, or ``scheme://rest`` (``s3://`` for ``s3a://``).

    What delta-rs and every process of a query name a location by; a relative local path is
    resolved against the working directory of the process that calls this (the driver, when
    options are parsed), so executors agree with it.
    """
    scheme, rest = split_uri(uri)
    if scheme == "file":
        return posixpath.abspath(rest)
    if scheme == "s3a":
        scheme = "s3"
    return f"{scheme}://{rest.rstrip('/')}"


def child_uri(uri: str, *parts: str) -> str:
    """The URI ``parts`` below ``uri`` (as written: not made canonical)."""
    joined = "/".join(p.strip("/") for p in parts if p)
    base = uri.rstrip("/")
    return f"{base}/{joined}" if joined else base
