"""The layout of a mirror root: what ``delta-2pc`` mirror mode writes, and what readers rely on.

``<root>/`` holds, for a query writing in mirror mode:

``<schema>.<table>/``
    One Delta table per source table (the name URL-quoted where it needs it), holding the
    source table's current rows. Each of the query's commits carries ``txn(query id, N)``.
``_changes/``
    The change log of the same batches (an append-only Delta table; the ``changeLog`` option
    may put it elsewhere).
``_checkpoints/``
    The checkpoint index, a Delta table with one row per mirror table per published checkpoint:
    ``checkpoint_id``, ``table`` (``schema.table``), ``path`` (relative to the root),
    ``version`` (the table's Delta version holding every batch up to ``checkpoint_id``),
    ``query_id``, ``published_at``, ``rebuilding`` (why the table is shown as of an earlier
    checkpoint while it is rebuilt, else null). Its rows for N are committed only after every
    mirror table holds N, so the newest ``checkpoint_id`` names versions that agree with one
    another: a source transaction that touched several tables is in all of them or in none
    (a table being rebuilt excepted, as ``rebuilding`` says). Any engine that reads
    Delta can use it (see docs/mirror.md for the SQL).
``_spark_ckpt/staging/<N>/<attempt>/``
    The folded changes of batch N waiting for its publish (deleted once N is published).
``_spark_ckpt/rebuild/<table>-<N>/``
    A table being rebuilt from a new read of its source since batch N (a Delta table no
    reader sees; the index's ``rebuilding`` column names the table meanwhile).

Pure layout (no Spark, no Delta); shared by the sink, which writes it, and
:func:`spark_ckpt.read_consistent`, which reads it.
"""

from __future__ import annotations

from urllib.parse import quote

from spark_ckpt.model.change_rows import CHANGES_TABLE, TYPES_COLUMN

__all__ = [
    "CHANGES_TABLE",
    "CHECKPOINTS_TABLE",
    "INDEX_COLUMNS",
    "STAGING_DIR",
    "TYPES_COLUMN",
    "table_directory",
]

CHECKPOINTS_TABLE = "_checkpoints"
STAGING_DIR = "_spark_ckpt"
INDEX_COLUMNS = (
    "checkpoint_id",
    "table",
    "path",
    "version",
    "query_id",
    "published_at",
    "rebuilding",
)
"""The checkpoint index's columns, in order."""


def table_directory(table: str) -> str:
    """The directory (relative to the root) of the mirror of source table ``table``.

    ``public.orders`` stays ``public.orders``; characters that are unsafe in a path segment are
    percent-encoded, and a leading underscore is encoded too so that no mirror can collide with
    the root's own ``_changes``, ``_checkpoints`` and ``_spark_ckpt``.
    """
    name = quote(table, safe=".-")
    if name.startswith("_"):
        name = "%5F" + name[1:]
    return name
