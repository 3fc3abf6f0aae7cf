"""Publishing: complete batches become Delta versions, in batch order, exactly once.

Batch N is published only once Spark's ``commits/N`` exists (checkpoint N is complete), only
after every earlier manifest is published, and with ``txn(query id, N)``. Every trigger calls the
same idempotent :func:`publish_completed`: the next batch's pre-commit, the control plane's
listener on the progress event for N and on termination, and recovery. Publishers of one
checkpoint serialise on a file lock in the checkpoint location and re-read the table's recorded
version under it, so concurrent publishers are harmless.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import Iterator
from urllib.parse import unquote

from deltalake.exceptions import CommitFailedError

from spark_ckpt.errors import PublishError

from .manifest import Manifest, ManifestStore
from .staging import StagedFile, parse_staged_name
from .table import commit_manifest, load_table

__all__ = ["discard_attempt", "precommit", "publish_completed"]

_log = logging.getLogger(__name__)
_RETAIN_PUBLISHED = 100  # manifests kept after publishing, like Spark's minBatchesToRetain


@contextlib.contextmanager
def _publish_lock(store: ManifestStore) -> Iterator[None]:
    os.makedirs(store.root, exist_ok=True)
    with open(os.path.join(store.root, "publish.lock"), "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _local(table: str, file: StagedFile | str) -> str:
    rel = file.path if isinstance(file, StagedFile) else file
    return os.path.join(table, *unquote(rel).split("/"))


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def discard_attempt(store: ManifestStore, table: str, batch_id: int, keep: set[str]) -> int:
    """Delete the staged files of ``batch_id`` that are not in ``keep`` (relative paths).

    Covers an older manifest of the same batch (an attempt that never completed) and intents of
    tasks whose files never reached a manifest. Returns how many files were deleted.
    """
    doomed: set[str] = set()
    old = store.read(batch_id)
    if old is not None:
        doomed |= {unquote(f.path) for f in old.files}
    for _, rel in store.intents(batch_id):
        doomed.add(rel)
    keep_plain = {unquote(p) for p in keep}
    removed = 0
    for rel in sorted(doomed - keep_plain):
        _remove(_local(table, rel))
        removed += 1
    return removed


def precommit(store: ManifestStore, manifest: Manifest) -> None:
    """Make batch N's manifest durable, replacing any aborted attempt's (driver, per batch).

    Publishes nothing of N: Spark has not written ``commits/N`` yet.
    """
    with _publish_lock(store):
        keep = {f.path for f in manifest.files}
        removed = discard_attempt(store, manifest.table, manifest.batch_id, keep)
        if removed:
            _log.info(
                "discarded %d staged files of an earlier attempt of batch %d",
                removed,
                manifest.batch_id,
            )
        store.write(manifest)
        store.drop_intents(manifest.batch_id)


def publish_completed(store: ManifestStore, table_uri: str, upto: int | None = None) -> list[int]:
    """Publish every complete, unpublished batch (up to ``upto``) in order; return their ids.

    Runs on the driver, in whichever process triggers it; idempotent.

    Raises
    ------
    PublishError
        A batch between the table's recorded version and a complete manifest has no manifest
        (publishing on would skip it), or a staged file has disappeared.
    """
    checkpoint = store.checkpoint
    with _publish_lock(store):
        batch_ids = store.batch_ids()
        if not batch_ids:
            return []
        query_id = checkpoint.query_id()
        table = load_table(table_uri)
        version = table.transaction_version(query_id) if table is not None else None
        published: list[int] = []
        for batch_id in batch_ids:
            if upto is not None and batch_id > upto:
                break
            if version is not None and batch_id <= version:
                continue
            if not checkpoint.committed(batch_id):
                break  # checkpoint N is not complete: neither N nor anything after may publish
            if version is not None and batch_id != version + 1:
                raise PublishError(
                    f"cannot publish batch {batch_id} to {table_uri}: the table holds this "
                    f"query's batches up to {version} and batch {version + 1} has no manifest in "
                    f"{store.root}. Publishing on would skip a batch; restore the checkpoint "
                    f"location that belongs with this table"
                )
            manifest = store.read(batch_id)
            assert manifest is not None
            missing = [f.path for f in manifest.files if not os.path.exists(_local(table_uri, f))]
            if missing:
                raise PublishError(
                    f"batch {batch_id}'s staged files are gone from {table_uri} (first: "
                    f"{missing[0]}); was VACUUM run with a retention shorter than the time the "
                    f"batch waited to be published? The batch cannot be published"
                )
            try:
                commit_manifest(table_uri, manifest)
            except CommitFailedError as e:
                # Someone else committed meanwhile (another writer, or a publisher elsewhere).
                table = load_table(table_uri)
                now = table.transaction_version(query_id) if table is not None else None
                if now is None or now < batch_id:
                    raise PublishError(
                        f"publishing batch {batch_id} to {table_uri} failed: {e}"
                    ) from e
            version = batch_id
            published.append(batch_id)
        if version is not None:
            for old in batch_ids:
                if old <= version - _RETAIN_PUBLISHED:
                    store.delete(old)
        return published


def is_own_staged_file(name: str, query_id: str) -> bool:
    """True for a file this query's sink staged (recognised by name)."""
    parsed = parse_staged_name(name)
    return parsed is not None and parsed[0] == query_id
