"""The Delta table side of the sink, through delta-rs: checks before staging, one commit per batch.

Every Delta log entry is written by delta-rs (``create_table_with_add_actions`` for the first
batch, ``DeltaTable.create_write_transaction`` after); this module only decides what to commit.
Each commit carries ``txn(appId=query id, version=batch id)``, so a batch is never published twice:
a publisher that finds the table's recorded version at or past N has nothing to do.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, Schema
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    RemoveAction,
    Transaction,
    create_table_with_add_actions,
)

from spark_ckpt.errors import StorageError, TableIncompatibleError
from spark_ckpt.state.storage import Location

from .manifest import Manifest
from .staging import StagedFile

__all__ = [
    "BatchCommit",
    "add_new_columns",
    "check_writable",
    "commit_files",
    "commit_manifest",
    "load_table",
    "table_partition_columns",
]

# Table features delta-rs cannot write correctly; refuse before anything is staged.
_UNSUPPORTED_FEATURES = {
    "deletionVectors": "deletion vectors",
    "columnMapping": "column mapping",
}


NEW_TABLE_CONFIGURATION = {"delta.checkpointInterval": "10"}
"""Table properties of a table this sink creates.

A checkpoint every 10 commits, delta-spark's default (delta-rs's is 100): every publisher reads
the table's log since its last checkpoint, once or more per batch, and on an object store each
commit file read is a request. A table created by anyone else keeps its own setting."""


def load_table(table: Location) -> DeltaTable | None:
    """The table at ``table``, or None when there is no Delta table there yet (driver).

    Raises
    ------
    StorageError
        When the store cannot be reached or refuses access (the message names the table, never
        the credentials).
    """
    try:
        return DeltaTable(
            table.url,
            storage_options=table.delta_options(),
        )
    except TableNotFoundError:
        return None
    except (OSError, DeltaError) as e:
        raise StorageError(
            f"cannot read the Delta table at {table.url}: {str(e).strip().splitlines()[0][:400]}"
        ) from e


def table_partition_columns(table: DeltaTable) -> list[str]:
    """The table's partition columns."""
    return list(table.metadata().partition_columns)


def _fields(schema_json: str) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in json.loads(schema_json)["fields"]}


def check_writable(
    uri: str,
    table: DeltaTable | None,
    incoming: pa.Schema,
    partition_by: Sequence[str],
    merge_schema: bool,
) -> tuple[str, ...]:
    """Refuse a table this stream cannot write; return the partition columns to use.

    Runs on the driver when the query starts (before any file is staged) and in each commit.

    Raises
    ------
    TableIncompatibleError
        Unsupported table features, a schema mismatch (new columns without ``mergeSchema``,
        changed types, missing non-nullable columns), or partition columns that differ.
    """
    names = set(incoming.names)
    for column in partition_by:
        if column not in names:
            raise TableIncompatibleError(
                f"partitionBy names {column!r}, which is not a column of the stream "
                f"({', '.join(incoming.names)})"
            )
    if table is None:
        return tuple(partition_by)
    protocol = table.protocol()
    features = set(protocol.writer_features or []) | set(protocol.reader_features or [])
    configuration = table.metadata().configuration
    if configuration.get("delta.enableDeletionVectors", "false").lower() == "true":
        features.add("deletionVectors")
    if configuration.get("delta.columnMapping.mode", "none").lower() != "none":
        features.add("columnMapping")
    for feature, words in _UNSUPPORTED_FEATURES.items():
        if feature in features:
            raise TableIncompatibleError(
                f"the Delta table at {uri} uses {words} ({feature}), which delta-2pc cannot "
                f"write (delta-rs does not support it). Write to a table without it, or disable "
                f"it (for deletion vectors: ALTER TABLE ... SET TBLPROPERTIES "
                f"('delta.enableDeletionVectors' = false) and REORG TABLE ... APPLY (PURGE))"
            )
    _refuse_unenforced_rules(uri, table, configuration)
    existing_partitions = table_partition_columns(table)
    if partition_by and list(partition_by) != existing_partitions:
        raise TableIncompatibleError(
            f"partitionBy={','.join(partition_by)} but the table at {uri} is partitioned by "
            f"{','.join(existing_partitions) or 'nothing'}: use the table's partitioning"
        )
    table_fields = _fields(table.schema().to_json())
    stream_fields = _fields(Schema.from_arrow(incoming).to_json())
    problems = []
    for name, field in stream_fields.items():
        have = table_fields.get(name)
        if have is None:
            if not merge_schema:
                problems.append(f"new column {name!r} (set mergeSchema=true to add it)")
        elif have["type"] != field["type"]:
            problems.append(
                f"column {name!r} is {json.dumps(have['type'])} in the table but "
                f"{json.dumps(field['type'])} in the stream"
            )
        elif field["nullable"] and not have["nullable"]:
            problems.append(f"column {name!r} is NOT NULL in the table but nullable in the stream")
    for name, have in table_fields.items():
        if name not in stream_fields and not have["nullable"]:
            problems.append(f"the stream lacks the table's NOT NULL column {name!r}")
    if problems:
        raise TableIncompatibleError(
            f"the stream's schema does not fit the Delta table at {uri}: " + "; ".join(problems)
        )
    return tuple(existing_partitions)


# Column metadata that makes delta-spark compute or check a column on every write. delta-rs's
# write transaction commits staged files as they are, so these rules would go unenforced.
_COLUMN_RULES = {
    "delta.generationExpression": "a generated column",
    "delta.identity.start": "an identity column",
    "delta.invariants": "a column invariant",
}


def _refuse_unenforced_rules(uri: str, table: DeltaTable, configuration: dict[str, str]) -> None:
    """Refuse tables whose CHECK constraints or computed columns delta-2pc would bypass."""
    checks = sorted(
        k[len("delta.constraints.") :] for k in configuration if k.startswith("delta.constraints.")
    )
    if checks:
        raise TableIncompatibleError(
            f"the Delta table at {uri} has CHECK constraint(s) {', '.join(checks)}, which "
            f"delta-2pc cannot enforce (it commits staged files without evaluating them), so "
            f"rows breaking them could be published. Write to a table without CHECK "
            f"constraints (ALTER TABLE ... DROP CONSTRAINT ...), or filter the stream instead"
        )
    for field in json.loads(table.schema().to_json())["fields"]:
        for key, words in _COLUMN_RULES.items():
            if key in (field.get("metadata") or {}):
                raise TableIncompatibleError(
                    f"the Delta table at {uri} has {words} ({field['name']!r}), which delta-2pc "
                    f"cannot compute or check (it commits staged files as they are). Write to a "
                    f"table without it, or compute the column in the stream"
                )


def add_new_columns(table: DeltaTable, schema: Schema, batch_id: int) -> None:
    """Evolve the table's schema first when the batch brings new columns (``mergeSchema``).

    Runs on the driver, once per commit of a batch; ``table`` then is at the new version.

    delta-rs keeps the table's schema on an append whose schema is wider, which would make the
    new columns' data invisible; so the new columns are added in a metadata-only commit before the
    batch's own commit. Re-running it after a crash finds the columns there and adds nothing.
    """
    existing = {field.name for field in table.schema().fields}
    new = [field for field in schema.fields if field.name not in existing]
    if new:
        table.alter.add_columns(
            new,
            commit_properties=CommitProperties(
                custom_metadata={
                    "spark-ckpt.sink": "delta-2pc",
                    "spark-ckpt.schemaChangeForBatch": batch_id,
                }
            ),
        )


def committed_version(
    delta: DeltaTable, query_id: str, batch_id: int, look_back: int = 16
) -> int | None:
    """The Delta version that published batch ``batch_id`` (from the newest ``look_back`` commits).

    Usually the newest commit is ours: it is read alone first, since every commit read is a
    request to the store.
    """
    delta.update_incremental()
    for limit in (1, look_back):
        for info in delta.history(limit):
            if (
                info.get("spark-ckpt.queryId") == query_id
                and info.get("spark-ckpt.batchId") == batch_id
            ):
                version = info.get("version")
                return int(version) if version is not None else None
    return None


def commit_manifest(table: Location, delta: DeltaTable | None, manifest: Manifest) -> int | None:
    """Publish one batch as one Delta commit carrying ``txn(query id, batch id)``.

    Runs on the driver (any publisher process). ``delta`` is the snapshot in which the caller
    found the query's transaction version to be N - 1 (None: no table yet), and the commit is
    made against that very snapshot: delta-rs then refuses it with :class:`CommitFailedError`
    when a concurrent commit carrying the same ``txn`` app id landed after the snapshot (the
    caller re-checks the table's txn version). Reloading the table here instead would hide such
    a commit and publish the batch twice. Returns the new Delta version (None if it cannot be
    found among the newest commits afterwards).
    """
    return commit_files(
        table,
        delta,
        BatchCommit(
            manifest.query_id,
            manifest.batch_id,
            Schema.from_json(manifest.schema_json),
            manifest.files,
            partition_by=manifest.partition_by,
            attempt=manifest.attempt,
        ),
    )


@dataclass(frozen=True)
class BatchCommit:
    """What one Delta commit of batch N holds: files added and removed, the table's schema.

    Attributes
    ----------
    query_id, batch_id
        The ``txn`` action (app id, version).
    schema
        The table's schema after the commit (new columns are added first).
    adds
        Files the commit adds.
    removes
        Paths (as in the Delta log) of files the commit removes (a mirror's rewritten files).
    partition_by
        The table's partition columns.
    attempt
        Which attempt of the batch staged the files.
    metadata
        More ``commitInfo`` entries (a mirror's checkpoint index keeps its versions there).
    overwrite
        The commit replaces every file of the table (``adds`` are all it holds after) and
        sets ``schema`` as it is: a mirror following a rename, drop or type change.
    """

    query_id: str
    batch_id: int
    schema: Schema
    adds: Sequence[StagedFile]
    removes: Sequence[str] = ()
    partition_by: Sequence[str] = ()
    attempt: str = ""
    metadata: Mapping[str, str] = dataclasses.field(default_factory=dict)
    overwrite: bool = False


CONFLICT_ATTEMPTS = 8
"""Tries of one batch's commit to a table while other publishers' commits keep landing first.

Each lost try means another publisher committed meanwhile; two publishers of a batch (a
writer's recovery and the control plane's listener) settle within two or three."""


def conflict_backoff(attempt: int) -> None:
    """Sleep a random moment before try ``attempt + 1``, so racing publishers fall out of step.

    Runs on the driver, after a lost commit race only.
    """
    time.sleep(random.uniform(0.0, 0.05 * attempt))


def commit_files(table: Location, delta: DeltaTable | None, batch: BatchCommit) -> int | None:
    """One Delta commit of ``batch`` against the snapshot ``delta`` (None: create the table).

    See :func:`commit_manifest` for why the snapshot is the caller's. Runs on the driver.
    Returns the new Delta version (None if it cannot be found among the newest commits).
    """
    adds = [
        AddAction(
            f.path,
            f.size,
            f.partition_values,
            f.modification_time,
            True,
            f.stats,
        )
        for f in batch.adds
    ]
    properties = CommitProperties(
        custom_metadata={
            "spark-ckpt.sink": "delta-2pc",
            "spark-ckpt.queryId": batch.query_id,
            "spark-ckpt.batchId": batch.batch_id,
            "spark-ckpt.rows": sum(f.rows for f in batch.adds),
            "spark-ckpt.attempt": batch.attempt,
            **batch.metadata,
        },
        app_transactions=[Transaction(batch.query_id, batch.batch_id)],
    )
    hooks = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
    if delta is None:
        # No retries: delta-rs would retry a creation that lost the race for version 0 as a
        # second CREATE TABLE at version 1 (no snapshot was read, so nothing conflicts), and
        # publish the batch twice. The caller re-reads the table instead.
        create_properties = CommitProperties(
            custom_metadata=properties.custom_metadata,
            app_transactions=properties.app_transactions,
            max_commit_retries=0,
        )
        try:
            create_table_with_add_actions(
                table.url,
                batch.schema,
                adds,
                mode="error",
                partition_by=list(batch.partition_by) or None,
                configuration=NEW_TABLE_CONFIGURATION,
                storage_options=table.delta_options(),
                commit_properties=create_properties,
                post_commithook_properties=hooks,
            )
        except DeltaError as e:
            if load_table(table) is None:
                raise
            raise CommitFailedError(f"the table was created concurrently: {e}") from e
        return 0
    actions: list[AddAction | RemoveAction] = list(adds)
    if batch.overwrite:
        # delta-rs removes every file of the snapshot itself, and writes the schema as given
        # (an append keeps the table's, whatever the schema passed).
        mode = "overwrite"
    else:
        mode = "append"
        add_new_columns(delta, batch.schema, batch.batch_id)
        now = int(time.time() * 1000)
        actions += [RemoveAction(path, True, now) for path in batch.removes]
    delta.create_write_transaction(
        actions,
        mode,
        batch.schema,
        partition_by=list(batch.partition_by) or None,
        commit_properties=properties,
        post_commithook_properties=hooks,
    )
    # delta-rs does not refresh the table object; concurrent appends may have landed too.
    return committed_version(delta, batch.query_id, batch.batch_id)
