"""The logical decoding output plugins the postgres connector reads (option ``plugin``)."""

from __future__ import annotations

__all__ = ["PLUGIN", "PLUGINS"]

PLUGIN = "wal2json"
"""The default: the ``wal2json`` extension (``postgresql-15-wal2json`` on Debian)."""

PLUGINS = ("wal2json", "pgoutput")
"""wal2json, and pgoutput: built into PostgreSQL (10+), it streams a publication."""
