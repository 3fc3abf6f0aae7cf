"""Mirror mode's two phases: plan batch N in its pre-commit, apply the plan when N is published.

**Pre-commit** (:func:`plan_batch`, driver, in ``commit(messages, N)`` before Spark writes
``commits/N``): the batch's staged change rows are folded per table (:mod:`.fold`), typed, and
checked against each mirror's schema. A change the mirror cannot take (a changed column type, a
value that does not fit, a change without a key) raises here, so the batch fails and nothing of
it is ever published. The folded rows are written under ``<root>/_spark_ckpt/staging/N/`` and
named in N's manifest.

**Publish** (:func:`apply_plan`, driver, whichever process publishes N, before the change log's
commit of N, which is the publish order's sequencer): each touched mirror is rewritten and
committed with ``txn(query id, N)``, skipped when its ``txn`` version already is N (a publisher
that crashed part way through, or a concurrent one); then the checkpoint index records every
mirror's version for N in one commit, also with ``txn(query id, N)``. A reader of the index's
newest checkpoint thus sees every table as of the same batch.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, Schema
from deltalake.exceptions import CommitFailedError

from spark_ckpt.errors import MirrorSchemaError, PublishError
from spark_ckpt.model.schema_changes import Behavior
from spark_ckpt.state.mirrors import (
    CHECKPOINTS_TABLE,
    STAGING_DIR,
    TYPES_COLUMN,
    table_directory,
)
from spark_ckpt.state.storage import Location, StorageNotFoundError, StorageOptions
from spark_ckpt.testing.faults import crash_point

from ..staging import StagedFile, staged_location, staged_name, write_staged_file
from ..table import (
    CONFLICT_ATTEMPTS,
    BatchCommit,
    commit_files,
    conflict_backoff,
    load_table,
)
from .evolution import ProjectedColumn, follow, identity, needs_rewrite
from .fold import END_AT, META_COLUMNS, START_AT, FoldedTable, empty_folded, fold_changes
from .plan import MirrorPlan, TablePlan
from .rewrite import rewrite_table
from .types import arrow_type, canonical_type

__all__ = [
    "CHANGE_COLUMNS",
    "INDEX_SCHEMA",
    "apply_plan",
    "discard_staging",
    "plan_batch",
]

_log = logging.getLogger(__name__)

CHANGE_COLUMNS = (
    "txn_id",
    "txn_order",
    "event_index",
    "commit_ts",
    "table",
    "op",
    "key",
    "before",
    "after",
)
"""The stream columns mirror mode reads (``column_types`` too, when the stream has it)."""

INDEX_SCHEMA = pa.schema(
    [
        pa.field("checkpoint_id", pa.int64()),
        pa.field("table", pa.string()),
        pa.field("path", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("query_id", pa.string()),
        pa.field("published_at", pa.timestamp("us", tz="UTC")),
    ]
)
"""The checkpoint index's schema (:data:`spark_ckpt.state.mirrors.INDEX_COLUMNS`)."""


def _staging(root: Location, batch_id: int, attempt: str | None = None) -> Location:
    base = root.child(STAGING_DIR, "staging", str(batch_id))
    return base if attempt is None else base.child(attempt)


def discard_staging(root: Location, batch_id: int, attempt: str | None = None) -> None:
    """Delete the folded changes of ``batch_id`` (one attempt's, or all); driver."""
    _staging(root, batch_id, attempt).delete_tree()


def _delta_type_name(kind: Any) -> str:
    """A Delta schema JSON type -> the Spark SQL name :func:`.types.arrow_type` reads."""
    if isinstance(kind, str):
        return kind
    if kind.get("type") == "array":
        return f"array<{_delta_type_name(kind['elementType'])}>"
    raise MirrorSchemaError(f"a mirror column of Delta type {json.dumps(kind)} is not supported")


def mirror_columns(delta: DeltaTable) -> list[tuple[str, str]]:
    """A mirror table's ``(name, Spark SQL type)`` columns, in order (driver)."""
    fields = json.loads(delta.schema().to_json())["fields"]
    return [(f["name"], canonical_type(_delta_type_name(f["type"]))) for f in fields]


def table_schema(delta: DeltaTable) -> pa.Schema:
    """A mirror table's current schema as the Arrow schema the rewrite writes."""
    return pa.schema([pa.field(name, arrow_type(kind)) for name, kind in mirror_columns(delta)])


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
            (*CHANGE_COLUMNS, TYPES_COLUMN), missing_columns="skip"
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
) -> MirrorPlan:
    """Fold, type and check batch N's changes; stage them for the publish (driver, per batch).

    ``files`` are the change rows the executors staged into ``changelog``; ``history`` keeps
    every row version (SCD type 2); ``behavior_of`` gives each table's schema change behavior.

    Raises
    ------
    MirrorSchemaError
        A column type that differs from the mirror's, or a schema change the mirror cannot
        follow (:class:`~spark_ckpt.errors.SchemaChangeError` under ``fail``).
    MirrorChangeError
        A change without a key, or a value that does not fit its column.
    """
    changes = _read_changes(changelog, files)
    folded: dict[str, FoldedTable] = {}
    if changes is not None and changes.num_rows:
        folded = fold_changes(changes, history, lambda table: behavior_of(table) == "ignore")
    plans = [
        _plan_table(root, folded[name], batch_id, attempt, history, behavior_of(name))
        for name in sorted(folded)
    ]
    crash_point("after_mirror_plan", batch_id)
    return MirrorPlan(root.url, tuple(plans))


def _plan_table(
    root: Location,
    table: FoldedTable,
    batch_id: int,
    attempt: str,
    history: bool,
    behavior: Behavior,
) -> TablePlan:
    """One table's part of batch N's plan, its folded rows staged (driver, per table)."""
    name = table.name
    directory = table_directory(name)
    location = root.child(directory)
    delta = load_table(location)
    stored = mirror_columns(delta) if delta is not None else []
    if not table.rows and not table.schema_events:  # a truncate, and nothing after it
        schema = table_schema(delta) if delta is not None else pa.schema([])
        schema_json = Schema.from_arrow(schema).to_json() if len(schema) else "{}"
        return TablePlan(name, directory, None, 0, table.key_columns, True, schema_json)
    projection = identity(stored)
    if delta is None and table.schema_events:
        # A mirror created by this batch starts as the source's table was before its first
        # change here: its columns keep the source's order through the changes.
        first = table.schema_events[0][0].before
        if first is not None:
            projection = identity((c.name, c.type) for c in first.columns)
    for event, position in table.schema_events:
        projection = follow(projection, event, behavior, position)
    keep = behavior == "ignore" and delta is not None
    projection = _with_batch_columns(projection, table, location, history, keep)
    if behavior == "evolve" and delta is not None:
        _refuse_vanished_columns(table, projection, location)
    schema = pa.schema([pa.field(c.name, arrow_type(c.type)) for c in projection])
    rewrite_all = delta is not None and needs_rewrite(projection, stored)
    rows = table.history_arrow(schema) if history else table.to_arrow(schema)
    relative = f"{STAGING_DIR}/staging/{batch_id}/{attempt}/{directory}.parquet"
    _staging(root, batch_id, attempt).make_dirs()
    write_staged_file(root, relative, rows)
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
    )


def _apply_table(root: Location, plan: TablePlan, query_id: str, batch_id: int) -> int | None:
    """Apply one table's part of batch N unless the table holds N already; return its version.

    Runs on the driver, once per table a batch touched. A commit that loses to another
    publisher's commit without N in it (that publisher's schema change for N, a commit of its
    own before N's data) is tried again on the newer snapshot, a bounded number of times.
    """
    location = root.child(plan.directory)
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            return _apply_table_once(root, location, plan, query_id, batch_id)
        except CommitFailedError as e:
            if attempt == CONFLICT_ATTEMPTS:
                raise PublishError(
                    f"publishing batch {batch_id} to the mirror {location.url} failed: {e} "
                    f"(other commits won {attempt} times in a row)"
                ) from e
            _log.debug("mirror %s: batch %d lost a commit race: %s", plan.table, batch_id, e)
            conflict_backoff(attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _apply_table_once(
    root: Location, location: Location, plan: TablePlan, query_id: str, batch_id: int
) -> int | None:
    """One try of :func:`_apply_table` on the table's newest snapshot (driver, once per try).

    Raises
    ------
    CommitFailedError
        Another publisher's commit landed first and the table does not hold N yet.
    """
    delta = load_table(location)
    if delta is not None:
        done = delta.transaction_version(query_id)
        if done is not None and done >= batch_id:
            return delta.version()
    if plan.folded is None:
        if delta is None:
            return None  # truncating a mirror that does not exist yet
        schema = table_schema(delta)
        folded = empty_folded(schema)
    else:
        try:
            folded = root.child(*plan.folded.split("/")).read_parquet()
        except StorageNotFoundError:
            # Gone, at the open or (an object store) at a read after it: a concurrent publisher
            # finished N (it deletes N's staging last).
            again = load_table(location)
            done = None if again is None else again.transaction_version(query_id)
            if again is None or done is None or done < batch_id:
                raise
            _log.debug("mirror %s: a concurrent publisher published batch %d", plan.table, batch_id)
            return again.version()
        schema = pa.schema([f for f in folded.schema if f.name not in META_COLUMNS])
    rewrite = rewrite_table(
        location,
        delta,
        folded,
        plan.key_columns or tuple(schema.names[:1]),
        plan.truncate,
        schema,
        query_id,
        batch_id,
        plan.history,
        plan.projection if plan.rewrite_all else None,
    )
    commit = BatchCommit(
        query_id,
        batch_id,
        Schema.from_arrow(schema),
        rewrite.adds,
        tuple(rewrite.removes),
        overwrite=plan.rewrite_all,
    )
    try:
        version = commit_files(location, delta, commit)
    except CommitFailedError:
        rewrite.discard(location)
        again = load_table(location)
        done = None if again is None else again.transaction_version(query_id)
        if again is None or done is None or done < batch_id:
            raise
        return again.version()
    if version is None:
        refreshed = load_table(location)
        version = None if refreshed is None else refreshed.version()
    _log.debug(
        "mirror %s: batch %d read %d files, removed %d, added %d",
        plan.table,
        batch_id,
        rewrite.files_read,
        len(rewrite.removes),
        len(rewrite.adds),
    )
    return version


_VERSIONS_KEY = "spark-ckpt.mirrorVersions"
"""The index commit's ``commitInfo`` entry repeating its rows (table -> [path, version])."""


def _previous_versions(
    index: DeltaTable, query_id: str, checkpoint_id: int
) -> dict[str, tuple[str, int]]:
    """Every mirror's version at ``checkpoint_id``, the index's newest checkpoint (driver).

    Read from the newest commit's ``commitInfo`` (one small read, however long the index is);
    from the index's rows when that commit is not the query's (a later writer, an old format).
    """
    import pyarrow.compute as pc  # lazily: 0.1 s per process, unused by append commits

    for info in index.history(1):
        if info.get("spark-ckpt.queryId") == query_id and (
            info.get("spark-ckpt.batchId") == checkpoint_id and _VERSIONS_KEY in info
        ):
            listed = json.loads(str(info[_VERSIONS_KEY]))
            return {name: (str(path), int(version)) for name, (path, version) in listed.items()}
    rows = index.to_pyarrow_dataset().to_table(filter=pc.field("checkpoint_id") == checkpoint_id)
    return {str(r["table"]): (str(r["path"]), int(r["version"])) for r in rows.to_pylist()}


def apply_plan(plan: MirrorPlan, storage: StorageOptions, query_id: str, batch_id: int) -> None:
    """Publish batch N to every mirror it touched, then to the checkpoint index (driver).

    Idempotent: a table (and the index) already holding N is skipped. Runs in the publisher,
    after ``commits/N`` exists and before the change log's commit of N.

    Raises
    ------
    PublishError
        A commit failed for another reason than a concurrent publish of the same batch.
    """
    root = Location(plan.root, storage)
    index_location = root.child(CHECKPOINTS_TABLE)
    index = load_table(index_location)
    done = None if index is None else index.transaction_version(query_id)
    if done is not None and done >= batch_id:
        return
    versions = {} if index is None or done is None else _previous_versions(index, query_id, done)
    for table in plan.tables:
        version = _apply_table(root, table, query_id, batch_id)
        if version is not None:
            versions[table.table] = (table.directory, version)
        crash_point("during_mirror", batch_id)
    now = dt.datetime.now(dt.timezone.utc)
    rows = pa.Table.from_pylist(
        [
            {
                "checkpoint_id": batch_id,
                "table": name,
                "path": path,
                "version": version,
                "query_id": query_id,
                "published_at": now,
            }
            for name, (path, version) in sorted(versions.items())
        ],
        schema=INDEX_SCHEMA,
    )
    staged = (
        [write_staged_file(index_location, staged_name(query_id, batch_id, 0), rows)]
        if rows.num_rows
        else []
    )
    listed = json.dumps({name: list(entry) for name, entry in sorted(versions.items())})
    commit = BatchCommit(
        query_id,
        batch_id,
        Schema.from_arrow(INDEX_SCHEMA),
        staged,
        metadata={_VERSIONS_KEY: listed},
    )
    try:
        commit_files(index_location, index, commit)
    except CommitFailedError as e:
        again = load_table(index_location)
        now_done = None if again is None else again.transaction_version(query_id)
        if now_done is None or now_done < batch_id:
            raise PublishError(
                f"recording batch {batch_id} in the checkpoint index {index_location.url} "
                f"failed: {e}"
            ) from e
        for file in staged:
            index_location.child(file.path).delete()
