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
import time
from collections.abc import Iterator
from urllib.parse import unquote

from deltalake.exceptions import CommitFailedError

from spark_ckpt.errors import PublishError, RestoreError
from spark_ckpt.model.events import PublishedEvent
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.testing.faults import crash_point

from .manifest import Manifest, ManifestStore
from .staging import StagedFile, parse_staged_name
from .table import commit_manifest, load_table

__all__ = [
    "clean_orphans",
    "discard_after",
    "discard_attempt",
    "precommit",
    "publish_completed",
]

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
        crash_point("during_abort", batch_id)
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
            crash_point("before_publish", batch_id)
            delta_version: int | None = None
            try:
                delta_version = commit_manifest(table_uri, manifest)
            except CommitFailedError as e:
                # Someone else committed meanwhile (another writer, or a publisher elsewhere).
                table = load_table(table_uri)
                now = table.transaction_version(query_id) if table is not None else None
                if now is None or now < batch_id:
                    raise PublishError(
                        f"publishing batch {batch_id} to {table_uri} failed: {e}"
                    ) from e
            crash_point("during_publish", batch_id)
            version = batch_id
            published.append(batch_id)
            HistoryLog(checkpoint).append(PublishedEvent(batch_id, delta_version, table_uri))
        if version is not None:
            for old in batch_ids:
                if old <= version - _RETAIN_PUBLISHED:
                    store.delete(old)
        return published


def discard_after(store: ManifestStore, table_uri: str, checkpoint_id: int | None) -> list[int]:
    """Discard every staged batch after ``checkpoint_id`` (all when None); return their ids.

    Runs on the driver when a query is restored to ``checkpoint_id`` and no attempt is running:
    manifests and staged files of later batches belong to attempts that never completed (Spark
    re-runs those batches and stages them anew).

    Raises
    ------
    RestoreError
        When the table already holds a batch after ``checkpoint_id``: the checkpoint location was
        rewound behind the table, and resuming would publish those batches' data a second time.
    """
    floor = -1 if checkpoint_id is None else checkpoint_id
    with _publish_lock(store):
        later = sorted(b for b in {*store.batch_ids(), *store.staged_batches()} if b > floor)
        if not later:
            return []
        table = load_table(table_uri)
        if table is not None:
            version = table.transaction_version(store.checkpoint.query_id())
            if version is not None and version > floor:
                raise RestoreError(
                    f"the query resumes from checkpoint {checkpoint_id} but {table_uri} already "
                    f"holds its batches up to {version}: the checkpoint location "
                    f"{store.checkpoint.location!r} is older than the table. Re-running those "
                    f"batches would publish their data twice; restore the checkpoint location "
                    f"that belongs with this table, or write to a new table"
                )
        for batch_id in later:
            removed = discard_attempt(store, table_uri, batch_id, set())
            store.delete(batch_id)
            store.drop_intents(batch_id)
            _log.info("restore: discarded batch %d (%d staged files)", batch_id, removed)
        return later


def clean_orphans(store: ManifestStore, table_uri: str, grace_period: float) -> list[str]:
    """Delete this query's staged files that nothing references, once they are old enough.

    A file is an orphan when its name marks it as staged by this query (other writers' files are
    never touched), no Delta version references it, no manifest lists it, and it is older than
    ``grace_period`` seconds (a task of a live attempt may still be about to report it). Runs on
    the driver when a query starts, at most once per grace period. Returns the deleted paths.
    """
    marker = os.path.join(store.root, "orphan-scan")
    now = time.time()
    try:
        if now - os.path.getmtime(marker) < grace_period:
            return []
    except FileNotFoundError:
        pass
    query_id = store.checkpoint.query_id()
    with _publish_lock(store):
        table = load_table(table_uri)
        live = table.file_uris() if table is not None else []
        root = os.path.abspath(table_uri)
        referenced = {os.path.relpath(p, root).replace(os.sep, "/") for p in live}
        for batch_id in store.batch_ids():
            manifest = store.read(batch_id)
            if manifest is not None:
                referenced |= {unquote(f.path) for f in manifest.files}
        deleted = []
        for directory, dirs, names in os.walk(table_uri):
            dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
            for name in names:
                parsed = parse_staged_name(name)
                if parsed is None or parsed[0] != query_id:
                    continue
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, table_uri).replace(os.sep, "/")
                if rel in referenced:
                    continue
                try:
                    if now - os.path.getmtime(path) < grace_period:
                        continue
                except FileNotFoundError:
                    continue
                _remove(path)
                deleted.append(rel)
        os.makedirs(store.root, exist_ok=True)
        with open(marker, "w", encoding="utf-8") as handle:
            handle.write(str(now))
    if deleted:
        _log.info("delta-2pc removed %d orphaned staged files from %s", len(deleted), table_uri)
    return deleted
