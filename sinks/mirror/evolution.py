"""How a mirror follows its source table's schema changes, per ``schemaChangeBehavior``.

A batch's schema change events of one table (:class:`~spark_ckpt.model.schema_changes.SchemaEvent`,
in commit order) turn the mirror's columns into its columns after the batch, each saying where
its values in the stored rows come from (:class:`ProjectedColumn`): a stored column (renamed,
widened) or, for a column the source added, the value the source's existing rows read. A
projection that is not just the stored columns plus NULL columns makes the publish rewrite the
table's files (:func:`needs_rewrite`). Delta's in-place features are not used: delta-rs, the
mirror's writer and a common reader, cannot add columns to a column-mapped table, and its
``to_pyarrow_table`` reads such a table's columns as NULL (delta-rs 1.6; docs/schema-changes.md).

=========  ===============================================================================
behavior   what the mirror does
=========  ===============================================================================
evolve     follows: renames, drops, adds (existing rows read the source's default), widens
fail       raises :class:`~spark_ckpt.errors.SchemaChangeError`: nothing of the batch is published
ignore     keeps its columns: added ones never appear, dropped and renamed ones read NULL in
           rows written after the change
lenient    follows without dropping: a dropped column stays (NULL in new rows), a renamed one
           stays under its old name and the new name is added (NULL in old rows)
=========  ===============================================================================

A change that cannot be followed in place (a type that is not a widening, an added column whose
existing values the stream does not carry, a rename that no column id tells from a drop and an
add) raises :class:`~spark_ckpt.errors.MirrorSchemaError` under ``evolve`` and ``lenient``.
Pure (no Spark, no Delta); runs on the driver in the batch's pre-commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from spark_ckpt.errors import MirrorSchemaError, SchemaChangeError
from spark_ckpt.model.schema_changes import Behavior, SchemaEvent, is_widening

__all__ = ["ProjectedColumn", "follow", "identity", "needs_rewrite"]


@dataclass(frozen=True)
class ProjectedColumn:
    """One column of a mirror after a batch, and where stored rows' values for it come from.

    Attributes
    ----------
    name
        The column's name after the batch.
    type
        Its Spark SQL type after the batch.
    source
        The stored column whose values it takes (cast to ``type``); None for a new column.
    default
        A new column's value in stored rows (None: NULL).
    """

    name: str
    type: str
    source: str | None
    default: Any = None

    def to_json(self) -> list[Any]:
        """Render for the manifest (``[name, type, source, default]``)."""
        return [self.name, self.type, self.source, self.default]

    @classmethod
    def from_json(cls, value: Sequence[Any]) -> ProjectedColumn:
        """Parse :meth:`to_json`."""
        name, type_name, source, default = value
        return cls(str(name), str(type_name), None if source is None else str(source), default)


def identity(columns: Iterable[tuple[str, str]]) -> tuple[ProjectedColumn, ...]:
    """The projection that keeps a mirror's ``(name, Spark SQL type)`` columns as they are."""
    return tuple(ProjectedColumn(name, kind, name) for name, kind in columns)


def needs_rewrite(projection: Sequence[ProjectedColumn], stored: Iterable[tuple[str, str]]) -> bool:
    """Whether applying ``projection`` to stored rows changes more than adding NULL columns.

    ``stored`` are the mirror's ``(name, type)`` columns before the batch. A rename, a drop, a
    widened type or a non-NULL value for existing rows needs every file of the table rewritten.
    """
    before = dict(stored)
    used = {c.source for c in projection if c.source is not None}
    if used != set(before):
        return True  # a column dropped
    return any(
        (c.source is None and c.default is not None)
        or (c.source is not None and (c.source != c.name or before[c.source] != c.type))
        for c in projection
    )


def follow(
    projection: tuple[ProjectedColumn, ...],
    event: SchemaEvent,
    behavior: Behavior,
    position: str,
) -> tuple[ProjectedColumn, ...]:
    """The mirror's projection after ``event``, under ``behavior`` (driver, per event).

    ``projection`` is the mirror's columns before the event; ``position`` says where the event
    is in the source (for errors). Columns of the mirror that ``event.before`` does not name
    (SCD type 2's validity columns, columns kept by ``lenient``) stay as they are.

    Raises
    ------
    SchemaChangeError
        Under ``fail``, for any change.
    MirrorSchemaError
        A change that cannot be followed in place, under ``evolve`` or ``lenient``.
    """
    if not event.changes or behavior == "ignore":
        return projection
    if behavior == "fail":
        raise SchemaChangeError(
            f"table {event.table}: the source's schema changed ({event.describe()}) at "
            f"{position}, and schemaChangeBehavior is 'fail' for it. Nothing of this batch is "
            f"published. To follow the change, restart the query with "
            f"schemaChangeBehavior=evolve (or lenient, or ignore) for this table"
        )
    ambiguous = event.ambiguous()
    if ambiguous:
        _cannot(
            event,
            position,
            f"column(s) {', '.join(ambiguous)} disappeared while others appeared, and the "
            f"source gives no column ids to tell a rename from a drop and an add",
        )
    mapping = event.column_mapping()
    old_types = {} if event.before is None else {c.name: c.type for c in event.before.columns}
    result: list[ProjectedColumn] = []
    for column in projection:
        if column.name not in mapping:
            result.append(column)  # not the source's: kept as it is
            continue
        renamed = mapping[column.name]
        if renamed is None:
            if behavior == "lenient":
                result.append(column)
            continue
        new = event.after.column(renamed)
        assert new is not None
        kind = _followed_type(column, old_types[column.name], new.type, event, position)
        if renamed != column.name and behavior == "lenient":
            result.append(column)
            result.append(ProjectedColumn(renamed, kind, None))
        else:
            result.append(ProjectedColumn(renamed, kind, column.source, column.default))
    names = {c.name for c in result}
    for added in event.added():
        if added.default_unknown:
            _cannot(
                event,
                position,
                f"column {added.name} was added with values for existing rows that the change "
                f"stream does not carry (a volatile default made the source rewrite the table)",
            )
        column = ProjectedColumn(added.name, added.type, None, added.default)
        if added.name in names:  # takes the place of a column the mirror kept
            result = [column if c.name == added.name else c for c in result]
        else:
            result.append(column)
    return tuple(result)


def _followed_type(
    column: ProjectedColumn, old: str, new: str, event: SchemaEvent, position: str
) -> str:
    """The mirror's type for ``column`` after the source's type went from ``old`` to ``new``."""
    if old == new:
        return column.type  # the mirror's own type (inferred mirrors may be wider)
    if is_widening(column.type, new):
        return new
    if is_widening(new, column.type):
        return column.type  # the mirror's column already holds every new value
    _cannot(
        event,
        position,
        f"column {column.name} changed type from {old} to {new}, which is not a widening of "
        f"the mirror's {column.type}",
    )
    raise AssertionError("unreachable")


def _cannot(event: SchemaEvent, position: str, why: str) -> None:
    raise MirrorSchemaError(
        f"table {event.table}: the mirror cannot follow the source's schema change "
        f"({event.describe()}) at {position} in place: {why}. Nothing of this batch is "
        f"published. Rebuild this table's mirror from a new snapshot (a new mirror root and "
        f"checkpoint location with snapshot=initial), or set schemaChangeBehavior.{event.table}"
        f"=ignore to keep the mirror's schema"
    )
