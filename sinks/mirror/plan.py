"""What publishing batch N does to the mirrors, recorded in N's manifest by the pre-commit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .compaction_policy import CompactionPolicy
from .evolution import ProjectedColumn
from .rebuild import RebuildState

__all__ = ["MirrorPlan", "TablePlan"]


@dataclass(frozen=True)
class TablePlan:
    """One mirror table's part of batch N.

    Attributes
    ----------
    table
        The source table (``schema.table``).
    directory
        The mirror's directory, relative to the root.
    folded
        The folded changes' file, relative to the root (None when the batch only truncated).
    rows
        Folded rows (final states of keys).
    key_columns
        The primary key's columns.
    truncate
        Empty the mirror before applying the rows.
    schema_json
        The mirror's Delta schema after batch N.
    history
        SCD type 2: the folded rows are row versions, and stored rows are kept.
    projection
        Where the stored rows' columns come from after a schema change (None: the stored
        columns by name, new ones NULL).
    rewrite_all
        The projection changes stored rows (a rename, a drop, a widening, an added column's
        value for existing rows): every file of the table is rewritten.
    shadow
        ``directory`` is a rebuild's shadow table (:mod:`.rebuild`): not in the checkpoint
        index.
    copy_from
        A finished rebuild: the table becomes a copy of this shadow table (one overwrite).
    marks
        The stored rows the batch's write tasks found holding its keys
        (:mod:`.task_marks`), a file relative to the root; None when they did not look.
    marks_version
        The table's version they looked at.
    marks_files_read
        Files whose key columns they read.
    """

    table: str
    directory: str
    folded: str | None
    rows: int
    key_columns: tuple[str, ...]
    truncate: bool
    schema_json: str
    history: bool = False
    projection: tuple[ProjectedColumn, ...] | None = None
    rewrite_all: bool = False
    shadow: bool = False
    copy_from: str | None = None
    marks: str | None = None
    marks_version: int | None = None
    marks_files_read: int = 0

    def to_json(self) -> dict[str, Any]:
        """Render for the manifest."""
        projection = None if self.projection is None else [c.to_json() for c in self.projection]
        return {
            "table": self.table,
            "directory": self.directory,
            "folded": self.folded,
            "rows": self.rows,
            "keyColumns": list(self.key_columns),
            "truncate": self.truncate,
            "schema": self.schema_json,
            "history": self.history,
            "projection": projection,
            "rewriteAll": self.rewrite_all,
            "shadow": self.shadow,
            "copyFrom": self.copy_from,
            "marks": self.marks,
            "marksVersion": self.marks_version,
            "marksFilesRead": self.marks_files_read,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> TablePlan:
        """Parse :meth:`to_json` output."""
        projection = value.get("projection")
        return cls(
            str(value["table"]),
            str(value["directory"]),
            value["folded"],
            int(value["rows"]),
            tuple(value["keyColumns"]),
            bool(value["truncate"]),
            str(value["schema"]),
            bool(value.get("history", False)),
            None if projection is None else tuple(ProjectedColumn.from_json(c) for c in projection),
            bool(value.get("rewriteAll", False)),
            bool(value.get("shadow", False)),
            value.get("copyFrom"),
            value.get("marks"),
            value.get("marksVersion"),
            int(value.get("marksFilesRead", 0)),
        )


@dataclass(frozen=True)
class MirrorPlan:
    """Batch N's mirror work: the root and each touched table, by table name.

    Attributes
    ----------
    root
        The mirror root's URL.
    tables
        The tables the batch changed, sorted by name (a rebuild's shadow before its table).
    rebuilding
        The tables being rebuilt after the batch (:mod:`.rebuild`).
    discard
        Shadow tables to delete once the batch is published (finished or superseded rebuilds).
    deletion_vectors
        A mirror table the batch creates gets deletion vectors (merge-on-read), unless it is
        SCD type 2 (copy-on-write).
    compaction
        When and what the publisher compacts after the batch (the sink's ``compact*`` options).
    """

    root: str
    tables: tuple[TablePlan, ...]
    rebuilding: tuple[RebuildState, ...] = ()
    discard: tuple[str, ...] = ()
    deletion_vectors: bool = True
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)

    def to_json(self) -> dict[str, Any]:
        """Render for the manifest."""
        return {
            "root": self.root,
            "tables": [t.to_json() for t in self.tables],
            "rebuilding": [r.to_json() for r in self.rebuilding],
            "discard": list(self.discard),
            "deletionVectors": self.deletion_vectors,
            "compaction": self.compaction.to_json(),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> MirrorPlan:
        """Parse :meth:`to_json` output."""
        return cls(
            str(value["root"]),
            tuple(TablePlan.from_json(t) for t in value["tables"]),
            tuple(RebuildState.from_json(r) for r in value.get("rebuilding", ())),
            tuple(str(d) for d in value.get("discard", ())),
            bool(value.get("deletionVectors", True)),
            # Manifests written before the policy existed: the defaults.
            CompactionPolicy.from_json(value["compaction"])
            if "compaction" in value
            else CompactionPolicy(),
        )
