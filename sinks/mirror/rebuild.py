"""Rebuilding one mirror table from a new read of its source table, while the others stream.

A schema change a mirror cannot follow in place (:func:`~spark_ckpt.model.schema_changes.
rebuild_reason`: ``text`` to ``int``, an added column whose existing values the stream lacks)
comes from a connector that can read the table again as a schema change row with
``rebuild='begin'``; the table's rows from there on (the read's ``op='r'`` rows and the
stream's changes) are the table anew, and a row with ``rebuild='end'`` says the read is
complete (:mod:`spark_ckpt.model.schema_changes`).

The mirror builds the new table beside the old one, in a *shadow* Delta table under
``<root>/_spark_ckpt/rebuild/`` that no reader sees, batch by batch, with the same publish as
any mirror table. The published table stays as it was before the change, and the checkpoint
index says so in its ``rebuilding`` column (:func:`spark_ckpt.read_consistent` warns). The
batch with the end copies the shadow's files into the table in one overwrite commit, so the
index's next checkpoint shows the rebuilt table with every other table as of the same batch.

Which tables are rebuilding is in the checkpoint index's newest commit (``commitInfo``), which a
batch's pre-commit reads (the mirrors hold N - 1 by then) and its publish writes. Runs on the
driver.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from spark_ckpt.errors import StateFormatError
from spark_ckpt.model.change_rows import ORDER
from spark_ckpt.model.schema_changes import SCHEMA_CHANGE_OP, SchemaEvent
from spark_ckpt.state.mirrors import STAGING_DIR, table_directory
from spark_ckpt.state.storage import Location

from ..staging import StagedFile, staged_name, write_staged_file
from .deletion_vectors import live_rows
from .dv_commit import has_deletion_vectors, log_files

__all__ = [
    "REBUILDING_KEY",
    "RebuildSplit",
    "RebuildState",
    "copy_shadow",
    "rebuilding_at",
    "shadow_directory",
    "split_rebuilds",
]

REBUILDING_KEY = "spark-ckpt.rebuilding"
"""The index commit's ``commitInfo`` entry listing the tables being rebuilt after it."""


@dataclass(frozen=True)
class RebuildState:
    """One mirror table being rebuilt.

    Attributes
    ----------
    table
        The source table.
    directory
        The shadow table's directory, relative to the root.
    since
        The batch whose begin row started it.
    reason
        The schema change, described, and where it is in the source.
    """

    table: str
    directory: str
    since: int
    reason: str

    def describe(self) -> str:
        """The index's ``rebuilding`` text for this table."""
        return (
            f"rebuilding since checkpoint {self.since} from a new read of the source table "
            f"({self.reason}); shown as of checkpoint {self.since - 1}"
        )

    def to_json(self) -> dict[str, Any]:
        """For the manifest and the index's ``commitInfo``."""
        return {
            "table": self.table,
            "directory": self.directory,
            "since": self.since,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> RebuildState:
        """Parse :meth:`to_json`."""
        try:
            return cls(
                str(value["table"]),
                str(value["directory"]),
                int(value["since"]),
                str(value["reason"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise StateFormatError(f"not a mirror rebuild: {json.dumps(value)[:200]}") from e


def shadow_directory(table: str, batch_id: int) -> str:
    """Where the rebuild of ``table`` begun in batch ``batch_id`` builds the new table."""
    return f"{STAGING_DIR}/rebuild/{table_directory(table)}-{batch_id}"


def rebuilding_at(index: DeltaTable | None, query_id: str) -> dict[str, RebuildState]:
    """The tables being rebuilt as of the index's newest commit of ``query_id`` (driver).

    Empty when the index has none of the query's commits, or a newer writer's commit is on top
    (a root is written by one query at a time).
    """
    if index is None or index.transaction_version(query_id) is None:
        return {}
    for info in index.history(1):
        if info.get("spark-ckpt.queryId") == query_id and REBUILDING_KEY in info:
            listed = json.loads(str(info[REBUILDING_KEY]))
            return {s["table"]: RebuildState.from_json(s) for s in listed}
    return {}


@dataclass(frozen=True)
class RebuildSplit:
    """A batch's change rows split between the published mirrors and the shadow tables.

    Attributes
    ----------
    published
        Rows for the mirrors as they are (tables not rebuilding, and a table's rows before a
        rebuild begins).
    shadow
        Rows of tables being rebuilt, from their begin row on (or all, for a rebuild begun in
        an earlier batch).
    begun
        Tables whose rebuild begins in this batch -> the begin event and where it is.
    """

    published: pa.Table
    shadow: pa.Table
    begun: dict[str, tuple[SchemaEvent, str]]


def split_rebuilds(
    changes: pa.Table,
    rebuilding: Mapping[str, RebuildState],
    rebuilds: Callable[[str], bool],
    position: Callable[[pa.Table, int], str],
) -> RebuildSplit:
    """Split a batch's change rows by where they go (driver, per batch).

    ``rebuilds(table)`` says whether the table's mirror follows rebuilds (``evolve`` and
    ``lenient``); the others take begin and end rows as plain schema change rows. Rows of a
    rebuilding table before a new begin row belong to a shadow that the new one replaces, and
    are left out.
    """
    import pyarrow.compute as pc  # lazily: 0.1 s per process, unused by append commits

    if not rebuilding and not pc.any(pc.equal(changes.column("op"), SCHEMA_CHANGE_OP)).as_py():
        return RebuildSplit(changes, changes.schema.empty_table(), {})  # the usual batch
    order = pc.sort_indices(changes, sort_keys=[(column, "ascending") for column in ORDER])
    ordered = changes.take(order)
    tables = ordered.column("table").to_pylist()
    ops = ordered.column("op").to_pylist()
    afters = ordered.column("after")
    begins: dict[str, int] = {}
    begun: dict[str, tuple[SchemaEvent, str]] = {}
    for i, (table, op) in enumerate(zip(tables, ops, strict=True)):
        if op != SCHEMA_CHANGE_OP or not rebuilds(table):
            continue
        after = afters[i].as_py()
        if after is None or '"rebuild":"begin"' not in after:
            continue
        before = ordered.column("before")[i].as_py()
        event = SchemaEvent.from_row(table, before, after)
        if event.rebuild == "begin":
            begins[table] = i  # the last one wins: an earlier rebuild's rows are superseded
            begun[table] = (event, position(ordered, i))
    into_shadow = []
    keep = []
    for i, table in enumerate(tables):
        begin = begins.get(table)
        if begin is not None:
            into_shadow.append(i >= begin)
            keep.append(i >= begin or table not in rebuilding)
        else:
            shadowed = table in rebuilding and rebuilds(table)
            into_shadow.append(shadowed)
            keep.append(True)
    shadow_mask = pa.array(into_shadow, pa.bool_())
    published_mask = pc.and_(pc.invert(shadow_mask), pa.array(keep, pa.bool_()))
    return RebuildSplit(ordered.filter(published_mask), ordered.filter(shadow_mask), begun)


def copy_shadow(
    table: Location, source: Location, shadow: DeltaTable | None, query_id: str, batch_id: int
) -> list[StagedFile]:
    """Copy the files of the shadow table at ``source`` into the mirror at ``table`` (driver).

    Once per finished rebuild; file by file, so memory holds one file's rows at a time. A
    shadow with deletion vectors is copied without the rows they delete.
    """
    if shadow is None:
        return []
    paths = [str(p) for p in pa.table(shadow.get_add_actions(flatten=True))["path"].to_pylist()]
    files = log_files(source, shadow.version(), paths) if has_deletion_vectors(shadow) else {}
    copied = []
    for sequence, path in enumerate(paths):
        file = files.get(path)
        rows = live_rows(source, path, None if file is None else file.deletion_vector)
        copied.append(write_staged_file(table, staged_name(query_id, batch_id, sequence), rows))
    return copied
