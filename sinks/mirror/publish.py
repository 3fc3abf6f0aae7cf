"""Mirror mode's two phases: plan batch N in its pre-commit, apply the plan when N is published.

**Pre-commit** (:func:`.precommit.plan_batch`, driver, in ``commit(messages, N)`` before Spark
writes ``commits/N``): the batch's staged change rows are folded per table (:mod:`.fold`),
typed, and checked against each mirror's schema. A change the mirror cannot take (a changed
column type, a value that does not fit, a change without a key) raises here, so the batch fails
and nothing of it is ever published. The folded rows are written under
``<root>/_spark_ckpt/staging/N/`` and named in N's manifest. A table whose schema change the
mirror cannot follow in place is rebuilt beside it (:mod:`.rebuild`).

**Publish** (:func:`apply_plan`, driver, whichever process publishes N, before the change log's
commit of N, which is the publish order's sequencer): each touched mirror is applied (by
deletion vectors, :mod:`.merge_on_read`, or copy-on-write, :mod:`.rewrite`) and committed with
``txn(query id, N)``, skipped when its ``txn`` version already is N (a publisher
that crashed part way through, or a concurrent one); then the checkpoint index records every
mirror's version for N in one commit, also with ``txn(query id, N)``. A reader of the index's
newest checkpoint thus sees every table as of the same batch.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, Schema
from deltalake.exceptions import CommitFailedError

from spark_ckpt.errors import MirrorSchemaError, PublishError
from spark_ckpt.state.mirrors import (
    CHECKPOINTS_TABLE,
)
from spark_ckpt.state.storage import Location, StorageNotFoundError, StorageOptions
from spark_ckpt.testing.faults import crash_point

from ..staging import staged_location, staged_name, write_staged_file
from ..table import (
    CONFLICT_ATTEMPTS,
    NEW_TABLE_CONFIGURATION,
    BatchCommit,
    add_new_columns,
    commit_files,
    conflict_backoff,
    load_table,
)
from .dv_commit import (
    DeletionCommit,
    LogFile,
    commit_deletions,
    create_table,
    has_deletion_vectors,
    log_files,
)
from .fold import (
    META_COLUMNS,
    empty_folded,
)
from .merge_on_read import FoundMarks, merge_on_read
from .plan import MirrorPlan, TablePlan
from .rebuild import (
    REBUILDING_KEY,
    copy_shadow,
)
from .rewrite import rewrite_table
from .types import arrow_type, canonical_type

__all__ = ["INDEX_SCHEMA", "apply_plan", "mirror_columns", "table_schema"]

_log = logging.getLogger(__name__)


INDEX_SCHEMA = pa.schema(
    [
        pa.field("checkpoint_id", pa.int64()),
        pa.field("table", pa.string()),
        pa.field("path", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("query_id", pa.string()),
        pa.field("published_at", pa.timestamp("us", tz="UTC")),
        pa.field("rebuilding", pa.string()),
    ]
)
"""The checkpoint index's schema (:data:`spark_ckpt.state.mirrors.INDEX_COLUMNS`)."""


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


def _apply_table(
    root: Location, plan: TablePlan, query_id: str, batch_id: int, deletion_vectors: bool = True
) -> int | None:
    """Apply one table's part of batch N unless the table holds N already; return its version.

    Runs on the driver, once per table a batch touched. A commit that loses to another
    publisher's commit without N in it (that publisher's schema change for N, a commit of its
    own before N's data) is tried again on the newer snapshot, a bounded number of times.
    """
    location = root.child(*plan.directory.split("/"))
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            return _apply_table_once(root, location, plan, query_id, batch_id, deletion_vectors)
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
    root: Location,
    location: Location,
    plan: TablePlan,
    query_id: str,
    batch_id: int,
    deletion_vectors: bool,
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
    if plan.copy_from is not None:
        return _publish_rebuilt(root, location, delta, plan, query_id, batch_id)
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
    key_columns = plan.key_columns or tuple(schema.names[:1])
    if _merges_on_read(location, delta, plan, deletion_vectors):
        return _apply_merge_on_read(
            location,
            delta,
            folded,
            key_columns,
            plan,
            schema,
            (query_id, batch_id),
            _found_marks(root, plan),
        )
    dvs = None
    if delta is not None and has_deletion_vectors(delta):
        # A schema change's rewrite of a table with DVs: copy-on-write that reads files
        # without their deleted rows.
        paths = pa.table(delta.get_add_actions(flatten=True))["path"].to_pylist()
        dvs = {p: f.deletion_vector for p, f in log_files(location, delta.version(), paths).items()}
    rewrite = rewrite_table(
        location,
        delta,
        folded,
        key_columns,
        plan.truncate,
        schema,
        query_id,
        batch_id,
        plan.history,
        plan.projection if plan.rewrite_all else None,
        dvs,
    )
    if delta is not None and dvs is not None and not plan.rewrite_all:
        # delta-rs's RemoveAction cannot name a file's DV (its overwrite can): a ``remove``
        # without it would leave the (path, DV) logical file live.
        removing = DeletionCommit(
            query_id,
            batch_id,
            {},
            rewrite.adds,
            _apply_info(rewrite.files_read, 0, 0, len(rewrite.removes)),
            removes=tuple(rewrite.removes),
        )
        return _commit_by_dv(location, delta, removing, schema, rewrite.discard)
    commit = BatchCommit(
        query_id,
        batch_id,
        Schema.from_arrow(schema),
        rewrite.adds,
        tuple(rewrite.removes),
        metadata=_apply_info(rewrite.files_read, 0, 0, len(rewrite.removes)),
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


def _merges_on_read(
    location: Location, delta: DeltaTable | None, plan: TablePlan, deletion_vectors: bool
) -> bool:
    """Whether batch N applies to this table by deletion vectors (driver, per table and try).

    A table with the feature does (SCD type 2 included), except a schema change's rewrite of
    every file (delta-rs's overwrite, which names each removed file's DV). A table
    without it keeps copy-on-write (its protocol is the user's: never upgraded silently). A new
    one gets DVs with ``deletion_vectors``, where the commit can be created only if absent
    (local disks and S3, :meth:`Location.create_bytes`).
    """
    if plan.rewrite_all:
        return False
    if delta is not None:
        return has_deletion_vectors(delta)
    return deletion_vectors and location.creates_exclusively


def _apply_info(
    read: int, marked: int, rows: int, rewritten: int, read_by_tasks: int = 0
) -> dict[str, str]:
    """``commitInfo`` entries saying what the apply read and changed (in Delta's history).

    ``filesRead`` counts the files whose keys the publisher read, ``filesReadByTasks`` those the
    batch's write tasks read on the executors (:mod:`.task_marks`).
    """
    return {
        "spark-ckpt.mirror.filesRead": str(read),
        "spark-ckpt.mirror.filesReadByTasks": str(read_by_tasks),
        "spark-ckpt.mirror.filesMarked": str(marked),
        "spark-ckpt.mirror.rowsMarked": str(rows),
        "spark-ckpt.mirror.filesRewritten": str(rewritten),
    }


def _found_marks(root: Location, plan: TablePlan) -> FoundMarks | None:
    """The marks the batch's write tasks found for ``plan``'s table, if they looked (driver).

    None when the file is gone: a concurrent publisher finished the batch and deleted its
    staging (the commit then finds the batch published), so reading every candidate is right.
    """
    if plan.marks is None or plan.marks_version is None:
        return None
    try:
        rows = root.child(*plan.marks.split("/")).read_parquet()
    except StorageNotFoundError:
        return None
    return FoundMarks(plan.marks_version, rows, plan.marks_files_read)


def _apply_merge_on_read(
    location: Location,
    delta: DeltaTable | None,
    folded: pa.Table,
    key_columns: tuple[str, ...],
    plan: TablePlan,
    schema: pa.Schema,
    names: tuple[str, int],
    found: FoundMarks | None,
) -> int | None:
    """Batch N's merge-on-read apply to one table, one commit (driver, per table and try).

    ``names``: the query id and N; ``found``: what N's write tasks found (:mod:`.task_marks`).

    Raises
    ------
    CommitFailedError
        Another publisher's commit landed first and the table does not hold N yet.
    """
    query_id, batch_id = names
    applied = merge_on_read(
        location,
        delta,
        folded,
        key_columns,
        plan.truncate,
        schema,
        query_id,
        batch_id,
        plan.history,
        found,
    )
    info = _apply_info(
        applied.files_read,
        len(applied.deletions),
        applied.rows_marked,
        applied.files_rewritten,
        applied.files_read_by_tasks,
    )
    commit = DeletionCommit(
        query_id,
        batch_id,
        applied.deletions,
        applied.adds,
        info,
        removes=tuple(applied.removes),
        merged=True,
    )
    _log.debug(
        "mirror %s: batch %d read %d files, marked %d rows in %d, rewrote %d, added %d",
        plan.table,
        batch_id,
        applied.files_read,
        applied.rows_marked,
        len(applied.deletions),
        applied.files_rewritten,
        len(applied.adds),
    )
    return _commit_by_dv(location, delta, commit, schema, applied.discard, applied.files)


def _commit_by_dv(
    location: Location,
    delta: DeltaTable | None,
    commit: DeletionCommit,
    schema: pa.Schema,
    discard: Callable[[Location], None],
    files: Mapping[str, LogFile] | None = None,
) -> int | None:
    """Commit ``commit`` by :mod:`.dv_commit` (creating the table when ``delta`` is None).

    Runs on the driver, once per table and try. A lost race is answered as
    :func:`~spark_ckpt.sinks.table.commit_files`' is: the files are deleted, and the table is
    read again; holding N, its version is returned, else the error is raised for a retry.

    Raises
    ------
    CommitFailedError
        Another publisher's commit landed first and the table does not hold N yet.
    """
    try:
        if delta is None:
            return create_table(
                location, Schema.from_arrow(schema).to_json(), commit, NEW_TABLE_CONFIGURATION
            )
        before = delta.version()
        add_new_columns(delta, Schema.from_arrow(schema), commit.batch_id)
        if delta.version() > before + 1:
            # Another commit landed meanwhile: the files and DVs planned at ``before`` may be
            # stale (another publisher's N among them).
            raise CommitFailedError(f"{location.url} changed while batch N was planned")
        return commit_deletions(location, delta, commit, files)
    except CommitFailedError:
        discard(location)
        again = load_table(location)
        done = None if again is None else again.transaction_version(commit.query_id)
        if again is None or done is None or done < commit.batch_id:
            raise
        return again.version()


def _publish_rebuilt(
    root: Location,
    location: Location,
    delta: DeltaTable | None,
    plan: TablePlan,
    query_id: str,
    batch_id: int,
) -> int | None:
    """Replace the mirror's rows and schema with its finished shadow's, in one commit (driver).

    Raises
    ------
    CommitFailedError
        Another publisher's commit landed first and the table does not hold N yet.
    """
    assert plan.copy_from is not None
    source = root.child(*plan.copy_from.split("/"))
    shadow = load_table(source)
    adds = copy_shadow(location, source, shadow, query_id, batch_id)
    crash_point("during_rebuild", batch_id)
    schema = Schema.from_json(plan.schema_json) if shadow is None else shadow.schema()
    commit = BatchCommit(query_id, batch_id, schema, adds, overwrite=delta is not None)
    try:
        return commit_files(location, delta, commit)
    except CommitFailedError:
        for file in adds:
            staged_location(location, file.path).delete()  # add paths are URL-encoded
        raise


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
        _discard_shadows(root, plan)  # again: a publisher may have stopped before
        return
    versions = {} if index is None or done is None else _previous_versions(index, query_id, done)
    for table in plan.tables:
        version = _apply_table(root, table, query_id, batch_id, plan.deletion_vectors)
        if version is not None and not table.shadow:
            versions[table.table] = (table.directory, version)
        crash_point("during_mirror", batch_id)
    rebuilding = {state.table: state.describe() for state in plan.rebuilding}
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
                "rebuilding": rebuilding.get(name),
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
    states = json.dumps([state.to_json() for state in plan.rebuilding])
    commit = BatchCommit(
        query_id,
        batch_id,
        Schema.from_arrow(INDEX_SCHEMA),
        staged,
        metadata={_VERSIONS_KEY: listed, REBUILDING_KEY: states},
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
    _discard_shadows(root, plan)


def _discard_shadows(root: Location, plan: MirrorPlan) -> None:
    """Delete the shadow tables of rebuilds that batch N finished or superseded (driver)."""
    for directory in plan.discard:
        root.child(*directory.split("/")).delete_tree()
