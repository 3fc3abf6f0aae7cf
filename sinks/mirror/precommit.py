"""Mirror mode's pre-commit: batch N's changes folded, typed, checked and staged for its publish.

:func:`plan_batch` runs on the driver in ``commit(messages, N)`` before Spark writes
``commits/N`` (see :mod:`.publish` for both phases). A change the mirror cannot take (a changed
column type, a value that does not fit, a change without a key) raises here, so the batch fails
and nothing of it is ever published. A table being rebuilt (:mod:`.rebuild`) has its rows
planned into its shadow table.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa
from deltalake import Schema

from spark_ckpt.errors import MirrorSchemaError
from spark_ckpt.model.change_rows import MIRROR_COLUMNS, TYPES_COLUMN
from spark_ckpt.model.schema_changes import Behavior, SchemaEvent
from spark_ckpt.state.mirrors import CHECKPOINTS_TABLE, STAGING_DIR, table_directory
from spark_ckpt.state.storage import Location
from spark_ckpt.testing.faults import crash_point

from ..staging import StagedFile, staged_location, write_staged_file
from ..table import load_table
from .compaction_policy import CompactionPolicy
from .evolution import ProjectedColumn, follow, identity, needs_rewrite
from .fold import END_AT, START_AT, FoldedTable, fold_changes, row_position
from .plan import MirrorPlan, TablePlan
from .publish import mirror_columns, table_schema
from .rebuild import RebuildState, rebuilding_at, shadow_directory, split_rebuilds
from .task_marks import TableMarks
from .types import arrow_type, canonical_type

__all__ = ["discard_staging", "plan_batch"]

_log = logging.getLogger(__name__)


def _staging(root: Location, batch_id: int, attempt: str | None = None) -> Location:
    base = root.child(STAGING_DIR, "staging", str(batch_id))
    return base if attempt is None else base.child(attempt)


def discard_staging(root: Location, batch_id: int, attempt: str | None = None) -> None:
    """Delete the folded changes of ``batch_id`` (one attempt's, or all); driver."""
    _staging(root, batch_id, attempt).delete_tree()


def _with_batch_columns(
    projection: tuple[ProjectedColumn, ...],
    folded: FoldedTable,
    location: Location,
    history: bool,
    keep_columns: bool,
) -> tuple[ProjectedColumn, ...]:
    """The mirror's columns for this batch: ``projection``, plus the batch's new columns.

    ``keep_columns`` (``ignore`` on an existing mirror) adds none. A column a schema change of
    the batch named has the type the change gave it; any other column must keep its type.

    Raises
    ------
    MirrorSchemaError
        A column whose type differs from the mirror's without a schema change saying so.
    """
    result = list(projection)
    known = {c.name: c for c in result}
    changed = {c.name for event, _ in folded.schema_events for c in event.after.columns}
    types = folded.column_types()
    if history:
        types = {**types, START_AT: "timestamp", END_AT: "timestamp"}
    for column, type_name in types.items():
        kind = canonical_type(type_name)
        have = known.get(column)
        if have is None:
            if not keep_columns or column in (START_AT, END_AT):
                result.append(ProjectedColumn(column, kind, None))
        elif have.type != kind and column not in changed and not keep_columns:
            raise MirrorSchemaError(
                f"table {folded.name}: column {column!r} is {have.type} in the mirror at "
                f"{location.url} but {type_name} in the stream, and no schema change event "
                f"said so. Nothing of this batch is published. A mirror follows type changes "
                f"its connector reports (see Schema changes); otherwise rebuild the mirror (a "
                f"new mirror root and checkpoint location, with snapshot=initial)"
            )
    return tuple(result)


def _read_changes(changelog: Location, files: Sequence[StagedFile]) -> pa.Table | None:
    parts = [
        # column_types only when the stream has it
        staged_location(changelog, staged.path).read_parquet(
            (*MIRROR_COLUMNS, TYPES_COLUMN), missing_columns="skip"
        )
        for staged in files
    ]
    return pa.concat_tables(parts, promote_options="default") if parts else None


def _refuse_vanished_columns(
    folded: FoldedTable, projection: tuple[ProjectedColumn, ...], location: Location
) -> None:
    """Refuse whole rows that lack a mirror column no schema change of the batch dropped.

    An insert (or a snapshot read) carries every column its table has. One without a column
    the mirror has means the source dropped or renamed it without the connector saying so
    (connectors that do not report schema changes): following would leave the column's stale
    values in every other row, so the batch stops here (``evolve`` only: ``lenient`` and
    ``ignore`` keep columns the source no longer has, by design).

    Raises
    ------
    MirrorSchemaError
        Naming the table and the columns.
    """
    # Stored columns only: rows before a column the batch adds (unreported) lack it rightly.
    expected = {c.name for c in projection if c.source is not None} - {START_AT, END_AT}
    for key, state in folded.rows.items():
        if state.values is None or state.given is not None:
            continue  # deleted, or an update that may leave unchanged values out
        vanished = expected - set(state.values)
        if vanished:
            raise MirrorSchemaError(
                f"table {folded.name}: a whole row (key {list(key)}) has no column "
                f"{', '.join(sorted(vanished))}, which the mirror at {location.url} has, and no "
                f"schema change of the stream dropped or renamed it. Nothing of this batch is "
                f"published: the source table changed in a way its connector does not report. "
                f"Rebuild the mirror (a new mirror root and checkpoint location, with "
                f"snapshot=initial), or set schemaChangeBehavior.{folded.name}=lenient to keep "
                f"the column (NULL in new rows)"
            )


def plan_batch(
    root: Location,
    changelog: Location,
    files: Sequence[StagedFile],
    query_id: str,
    batch_id: int,
    attempt: str,
    history: bool = False,
    behavior_of: Callable[[str], Behavior] = lambda table: "evolve",
    deletion_vectors: bool = True,
    compaction: CompactionPolicy | None = None,
    marks: Mapping[str, TableMarks] | None = None,
) -> MirrorPlan:
    """Fold, type and check batch N's changes; stage them for the publish (driver, per batch).

    ``files`` are the change rows the executors staged into ``changelog``; ``history`` keeps
    every row version (SCD type 2); ``behavior_of`` gives each table's schema change behavior;
    ``deletion_vectors``: mirror tables the batch creates get them (merge-on-read);
    ``compaction``: the policy the publisher compacts by after the batch (the defaults when
    None); ``marks``: per table, the stored rows the write tasks found holding the batch's keys
    (:func:`.task_marks.combine`), staged beside its folded changes.

    Raises
    ------
    MirrorSchemaError
        A column type that differs from the mirror's, or a schema change the mirror cannot
        follow (:class:`~spark_ckpt.errors.SchemaChangeError` under ``fail``).
    MirrorChangeError
        A change without a key, or a value that does not fit its column.
    """
    changes = _read_changes(changelog, files)
    rebuilding = rebuilding_at(load_table(root.child(CHECKPOINTS_TABLE)), query_id)
    folded: dict[str, FoldedTable] = {}
    shadows: dict[str, FoldedTable] = {}
    begun: dict[str, tuple[SchemaEvent, str]] = {}

    def rebuilds(table: str) -> bool:
        return behavior_of(table) in ("evolve", "lenient")

    def keeps_schema(table: str) -> bool:
        return behavior_of(table) == "ignore"

    if changes is not None and changes.num_rows:
        split = split_rebuilds(changes, rebuilding, rebuilds, row_position)
        if history and split.begun:
            name, (event, where) = next(iter(sorted(split.begun.items())))
            raise MirrorSchemaError(
                f"table {name}: the mirror cannot follow the source's schema change "
                f"({event.describe()}) at {where} in place, and an SCD type 2 mirror is not "
                f"rebuilt from a new read of the table (that would replace the history it "
                f"keeps). Nothing of this batch is published. Replay the table into a new "
                f"mirror, or set schemaChangeBehavior.{name}=ignore to keep its schema"
            )
        if split.published.num_rows:
            folded = fold_changes(split.published, history, keeps_schema)
        if split.shadow.num_rows:
            shadows = fold_changes(split.shadow, history, keeps_schema)
        begun = split.begun
    states = dict(rebuilding)
    discard = [states.pop(name).directory for name in rebuilding if not rebuilds(name)]
    plans: list[TablePlan] = []
    for name in sorted({*folded, *shadows}):
        behavior = behavior_of(name)
        if name in folded:
            found = None if marks is None else marks.get(name)
            plans.append(
                _plan_table(root, folded[name], batch_id, attempt, history, behavior, found=found)
            )
        if name not in shadows:
            continue
        if name in begun:
            if name in states:
                discard.append(states[name].directory)  # superseded by a new rebuild
            event, where = begun[name]
            reason = f"{event.describe()} at {where}"
            states[name] = RebuildState(name, shadow_directory(name, batch_id), batch_id, reason)
            _log.info("mirror %s: batch %d begins rebuilding it (%s)", name, batch_id, reason)
        state = states[name]
        shadow = _plan_table(
            root,
            shadows[name],
            batch_id,
            attempt,
            history,
            behavior,
            state.directory,
            name in begun,
        )
        plans.append(dataclasses.replace(shadow, shadow=True))
        if any(event.rebuild == "end" for event, _ in shadows[name].schema_events):
            plans.append(
                TablePlan(
                    name,
                    table_directory(name),
                    None,
                    0,
                    shadow.key_columns,
                    True,
                    shadow.schema_json,
                    history,
                    copy_from=state.directory,
                )
            )
            discard.append(states.pop(name).directory)
            _log.info("mirror %s: batch %d publishes its rebuilt table", name, batch_id)
    crash_point("after_mirror_plan", batch_id)
    return MirrorPlan(
        root.url,
        tuple(plans),
        tuple(states[name] for name in sorted(states)),
        tuple(discard),
        deletion_vectors,
        compaction or CompactionPolicy(),
    )


def _plan_table(
    root: Location,
    table: FoldedTable,
    batch_id: int,
    attempt: str,
    history: bool,
    behavior: Behavior,
    directory: str | None = None,
    fresh: bool = False,
    found: TableMarks | None = None,
) -> TablePlan:
    """One table's part of batch N's plan, its folded rows staged (driver, per table).

    ``directory`` is where the rows go, when not the table's mirror (a rebuild's shadow);
    ``fresh``: a new shadow, whose first schema event is the rebuild's begin; ``found``: the
    marks the write tasks found in the table's mirror, staged when the publish can use them.
    """
    name = table.name
    directory = directory or table_directory(name)
    location = root.child(*directory.split("/"))
    delta = None if fresh else load_table(location)
    stored = mirror_columns(delta) if delta is not None else []
    if not table.rows and not table.schema_events:  # a truncate, and nothing after it
        schema = table_schema(delta) if delta is not None else pa.schema([])
        schema_json = Schema.from_arrow(schema).to_json() if len(schema) else "{}"
        return TablePlan(name, directory, None, 0, table.key_columns, True, schema_json)
    projection = identity(stored)
    events = table.schema_events
    if fresh:
        # The new table starts with the schema the rebuild begins with.
        projection = identity((c.name, c.type) for c in events[0][0].after.columns)
        events = events[1:]
    elif delta is None and events:
        # A mirror created by this batch starts as the source's table was before its first
        # change here: its columns keep the source's order through the changes.
        first = events[0][0].before
        if first is not None:
            projection = identity((c.name, c.type) for c in first.columns)
    for event, position in events:
        projection = follow(projection, event, behavior, position)
    keep = behavior == "ignore" and delta is not None
    projection = _with_batch_columns(projection, table, location, history, keep)
    if behavior == "evolve" and delta is not None:
        _refuse_vanished_columns(table, projection, location)
    schema = pa.schema([pa.field(c.name, arrow_type(c.type)) for c in projection])
    rewrite_all = delta is not None and needs_rewrite(projection, stored)
    rows = table.history_arrow(schema) if history else table.to_arrow(schema)
    stem = table_directory(name) + (".rebuild" if directory != table_directory(name) else "")
    relative = f"{STAGING_DIR}/staging/{batch_id}/{attempt}/{stem}.parquet"
    _staging(root, batch_id, attempt).make_dirs()
    write_staged_file(root, relative, rows)
    marks = None
    if (
        found is not None
        and found.rows is not None
        and found.version is not None
        and found.directory == directory
        and found.key_columns == table.key_columns
        and not (rewrite_all or table.truncated)
    ):
        marks = f"{STAGING_DIR}/staging/{batch_id}/{attempt}/{stem}.marks.parquet"
        write_staged_file(root, marks, found.rows)
    if rewrite_all:
        _log.info(
            "mirror %s: batch %d follows a schema change that rewrites the table (%s)",
            name,
            batch_id,
            "; ".join(event.describe() for event, _ in table.schema_events),
        )
    return TablePlan(
        name,
        directory,
        relative,
        rows.num_rows,
        table.key_columns,
        table.truncated,
        Schema.from_arrow(schema).to_json(),
        history,
        projection if rewrite_all else None,
        rewrite_all,
        marks=marks,
        marks_version=None if marks is None or found is None else found.version,
        marks_files_read=0 if marks is None or found is None else found.files_read,
    )
