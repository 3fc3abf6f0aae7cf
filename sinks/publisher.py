"""Publishing: complete batches become Delta versions, in batch order, exactly once.

Batch N is published only once Spark's ``commits/N`` exists (checkpoint N is complete), only
after batch N - 1 is published, and with ``txn(query id, N)``. Every trigger calls the same
idempotent :func:`publish_completed`: the next batch's pre-commit, the control plane's listener
on the progress event for N and on termination, and recovery.

There is no lock: object stores have none, and publishers run in several processes (and, with a
stale driver, on several machines). The Delta log itself decides. Every publisher reads the
table's transaction version for the query, and commits batch N only when it is N - 1; two
publishers that race both put ``_delta_log/<v>.json`` with a conditional put (S3 ``If-None-Match``,
an atomic create on local disks, ADLS and GCS), and delta-rs refuses to retry a commit over a
concurrent one that carries the same ``txn`` app id. So the loser fails, re-reads the version and
finds N published. A mirror batch's first publisher claims it (:mod:`.publish_claim`) so that a
second one waits for it instead of applying the batch again at the same time; the claim is
advisory, and nothing waits for a claimant that is gone.

Fencing a stale driver: each run of the query registers in ``delta_2pc/runs/`` at its first
pre-commit, and a publisher acting for a run that is no longer the newest refuses with
:class:`~spark_ckpt.errors.FencedError` before it commits, which fails that run's batch. Recovery
(publishing what an earlier run completed) needs no run: it publishes manifests of batches that
Spark's checkpoint says are complete, which any run would publish identically.

Cleaning up never lists the table: the files of other attempts of a published batch are found
through their manifests and the executors' intents.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from spark_ckpt.errors import FencedError, PublishError, RestoreError
from spark_ckpt.model.events import PublishedEvent
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.state.storage import Location
from spark_ckpt.testing.faults import crash_point

from .manifest import Manifest, ManifestStore
from .mirror.compaction import compact_after_batch
from .mirror.precommit import discard_staging
from .mirror.publish import apply_plan
from .publish_claim import claim, release, wait_for_claimant
from .snapshots import check_out, give_back
from .staging import staged_location
from .table import CONFLICT_ATTEMPTS, commit_manifest, conflict_backoff, load_table

__all__ = [
    "clean_orphans",
    "discard_after",
    "discard_unlisted",
    "precommit",
    "publish_completed",
]

_log = logging.getLogger(__name__)
_RETAIN_PUBLISHED = 100  # manifests kept after publishing, like Spark's minBatchesToRetain


def _plain(manifest: Manifest) -> set[str]:
    return {unquote(f.path) for f in manifest.files}


def _delete_files(table: Location, paths: set[str], batch_id: int) -> int:
    for rel in sorted(paths):
        staged_location(table, rel).delete()
        crash_point("during_abort", batch_id)
    return len(paths)


def discard_unlisted(store: ManifestStore, table: Location, batch_id: int, attempt: str) -> int:
    """Delete the files ``attempt`` staged for ``batch_id`` that none of its manifests lists.

    Those are the files of failed task attempts (Spark retried the task, whose new files are in
    the commit messages). Runs on the driver in the pre-commit and when a batch is aborted.
    Returns how many files were deleted.
    """
    keep: set[str] = set()
    for manifest in store.manifests(batch_id):
        if manifest.attempt == attempt:
            keep |= _plain(manifest)
    doomed = {i.path for i in store.intents(batch_id, attempt)} - keep
    return _delete_files(table, doomed, batch_id)


def precommit(store: ManifestStore, manifest: Manifest) -> None:
    """Make batch N's manifest durable (driver, per batch). Publishes nothing of N.

    Spark has not written ``commits/N`` yet. Files staged by failed tasks of this attempt are
    deleted first; the intents of this attempt are dropped once the manifest names its files.
    """
    doomed = {i.path for i in store.intents(manifest.batch_id, manifest.attempt)} - _plain(manifest)
    removed = _delete_files(manifest_table(manifest, store), doomed, manifest.batch_id)
    if removed:
        _log.info(
            "discarded %d staged files of failed tasks of batch %d", removed, manifest.batch_id
        )
    store.write(manifest)
    store.drop_intents(manifest.batch_id, manifest.attempt)


def manifest_table(manifest: Manifest, store: ManifestStore) -> Location:
    """The table ``manifest`` publishes to, reachable with the checkpoint's storage options."""
    return Location(manifest.table, store.checkpoint.options)


def _choose(
    store: ManifestStore, table: Location, batch_id: int, preferred: str | None
) -> Manifest:
    """The manifest to publish for ``batch_id``: the preferred run's, else the first complete.

    Complete: all its files exist.
    """
    manifests = store.manifests(batch_id)
    if not manifests:
        raise PublishError(
            f"cannot publish batch {batch_id} to {table.url}: Spark completed it but it has no "
            f"manifest in {store.root}. Publishing on would skip a batch; restore the checkpoint "
            f"location that belongs with this table"
        )
    manifests.sort(key=lambda m: (m.attempt != preferred, m.attempt))
    missing = ""
    for manifest in manifests:
        gone = [f.path for f in manifest.files if not staged_location(table, f.path).exists()]
        if not gone:
            return manifest
        missing = missing or gone[0]
    raise PublishError(
        f"batch {batch_id}'s staged files are gone from {table.url} (first: {missing}); was "
        f"VACUUM run with a retention shorter than the time the batch waited to be published? "
        f"The batch cannot be published"
    )


def _check_fence(store: ManifestStore, run: str | None, batch_id: int) -> None:
    if run is None:
        return
    newest = store.newest_run()
    if newest is not None and newest != run:
        raise FencedError(
            f"run {run} of the query on {store.checkpoint.location} may not publish batch "
            f"{batch_id}: run {newest} started later on the same checkpoint location. Two "
            f"drivers must never run one query; this one stops so that only the newest publishes"
        )


def _tidy(store: ManifestStore, table: Location, batch_id: int, published: Manifest) -> None:
    """Delete what other attempts of a published batch staged, and their intents and manifests."""
    keep = _plain(published)
    doomed: set[str] = {i.path for i in store.intents(batch_id)}
    for manifest in store.manifests(batch_id):
        if manifest.attempt != published.attempt:
            doomed |= _plain(manifest)
    _delete_files(table, doomed - keep, batch_id)
    store.drop_intents(batch_id)
    if published.mirror is not None:
        release(store, batch_id)  # a claim of a publisher killed part way through


def _holding(table: Location, query_id: str, batch_id: int) -> Callable[[], bool]:
    """Whether ``table`` holds ``batch_id`` of ``query_id``, asked when called."""

    def holds() -> bool:
        version = published_version(table, query_id)
        return version is not None and version >= batch_id

    return holds


def published_version(table: Location, query_id: str) -> int | None:
    """The newest batch of ``query_id`` that ``table`` holds (its ``txn`` version), or None."""
    delta = check_out(table)
    try:
        return None if delta is None else delta.transaction_version(query_id)
    finally:
        give_back(table, delta)


def publish_completed(
    store: ManifestStore, table: Location, upto: int | None = None, run: str | None = None
) -> list[int]:
    """Publish every complete, unpublished batch (up to ``upto``) in order; return their ids.

    Runs on the driver, in whichever process triggers it; idempotent. ``run`` is the run id
    of the query run this publisher acts for (fenced when a newer run exists; its own
    manifests are preferred), None for recovery (which prefers the newest run's manifests).

    Raises
    ------
    PublishError
        A batch Spark completed has no manifest (publishing on would skip it), or its staged
        files have disappeared.
    FencedError
        A newer run of the query exists.
    """
    delta = check_out(table)
    try:
        published, delta = _publish_from(store, table, delta, upto, run)
        return published
    finally:
        give_back(table, delta)


def _publish_from(
    store: ManifestStore,
    table: Location,
    delta: DeltaTable | None,
    upto: int | None,
    run: str | None,
) -> tuple[list[int], DeltaTable | None]:
    """:func:`publish_completed` from the snapshot ``delta``; returns the newest snapshot too."""
    checkpoint = store.checkpoint
    query_id = checkpoint.query_id()
    version = None if delta is None else delta.transaction_version(query_id)
    if version is None:
        known = store.batch_ids()
        if not known:
            return [], delta
        batch_id = known[0]
    else:
        batch_id = version + 1
    published: list[int] = []
    preferred = run
    lost = 0  # commit races lost in a row on this batch
    while upto is None or batch_id <= upto:
        if not checkpoint.committed(batch_id):
            break  # checkpoint N is not complete: neither N nor anything after may publish
        if preferred is None:
            preferred = store.newest_run() or ""  # recovery sides with the newest run
        manifest = _choose(store, table, batch_id, preferred)
        _check_fence(store, run, batch_id)
        crash_point("before_publish", batch_id)
        claimed: int | None = None
        if manifest.mirror is not None:
            if claim(store, batch_id, run):
                claimed = batch_id
            elif wait_for_claimant(store, batch_id, _holding(table, query_id, batch_id)):
                delta = load_table(table)
                now = None if delta is None else delta.transaction_version(query_id)
                assert now is not None, "the claimant published the batch"
                batch_id, lost = max(now, batch_id) + 1, 0
                continue
        delta_version: int | None = None
        try:
            if manifest.mirror is not None:
                # Before the change log's commit of N, which tells every publisher N is done.
                apply_plan(manifest.mirror, checkpoint.options, query_id, batch_id)
            # Against the snapshot that showed N - 1: a concurrent publish of N is a conflict.
            delta_version = commit_manifest(table, delta, manifest)
        except CommitFailedError as e:
            # Another publisher committed meanwhile: fine if it published this batch. If not
            # yet (its schema change for N is a commit of its own before N's), try N again on
            # the newer snapshot.
            delta = load_table(table)
            now = None if delta is None else delta.transaction_version(query_id)
            if now is None or now < batch_id:
                lost += 1
                if lost == CONFLICT_ATTEMPTS:
                    raise PublishError(
                        f"publishing batch {batch_id} to {table.url} failed: {e} (other commits "
                        f"won {lost} times in a row)"
                    ) from e
                conflict_backoff(lost)
                continue
            batch_id, lost = now + 1, 0
            continue
        finally:
            if claimed is not None:
                release(store, claimed)
        lost = 0
        crash_point("during_publish", batch_id)
        published.append(batch_id)
        HistoryLog(checkpoint).append(PublishedEvent(batch_id, delta_version, table.url))
        _tidy(store, table, batch_id, manifest)
        if manifest.mirror is not None:
            discard_staging(Location(manifest.mirror.root, checkpoint.options), batch_id)
            # After the batch is visible everywhere: its freshness never waits for this.
            compact_after_batch(manifest.mirror, checkpoint.options, batch_id)
        if batch_id >= _RETAIN_PUBLISHED:
            store.delete(batch_id - _RETAIN_PUBLISHED)
        # The next batch is committed against a snapshot at least as new as this commit; if
        # another publisher got further meanwhile, carry on after what it published.
        delta = load_table(table) if delta is None else delta
        assert delta is not None, "the table exists after a commit"
        now = delta.transaction_version(query_id)
        batch_id = max(batch_id, now if now is not None else batch_id) + 1
    return published, delta


def discard_after(store: ManifestStore, table: Location, checkpoint_id: int | None) -> list[int]:
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
    later = sorted(b for b in {*store.batch_ids(), *store.staged_batches()} if b > floor)
    if not later:
        return []
    version = published_version(table, store.checkpoint.query_id())
    if version is not None and version > floor:
        raise RestoreError(
            f"the query resumes from checkpoint {checkpoint_id} but {table.url} already "
            f"holds its batches up to {version}: the checkpoint location "
            f"{store.checkpoint.location!r} is older than the table. Re-running those "
            f"batches would publish their data twice; restore the checkpoint location "
            f"that belongs with this table, or write to a new table"
        )
    for batch_id in later:
        doomed = {i.path for i in store.intents(batch_id)}
        for manifest in store.manifests(batch_id):
            doomed |= _plain(manifest)
            if manifest.mirror is not None:
                root = Location(manifest.mirror.root, store.checkpoint.options)
                discard_staging(root, batch_id)
        removed = _delete_files(table, doomed, batch_id)
        store.delete(batch_id)
        store.drop_intents(batch_id)
        _log.info("restore: discarded batch %d (%d staged files)", batch_id, removed)
    return later


def clean_orphans(store: ManifestStore, table: Location, grace_period: float) -> list[int]:
    """Delete staged work nothing will publish; return the batches cleaned (driver, at start).

    Two kinds, both found through the checkpoint location, never by listing the table's
    directories:

    - leftovers of published batches (a publisher crashed before tidying up): every file of the
      batch's intents and other attempts' manifests that the published attempt does not list.
      Which attempt was published is read from the Delta log's live files, once, and only
      when there are such leftovers;
    - batches Spark never completed whose intents are all older than ``grace_period`` seconds
      (a live attempt may still be staging younger ones; Spark re-runs the batch anyway).
    """
    query_id = store.checkpoint.query_id()
    version = published_version(table, query_id)
    latest = store.checkpoint.latest_committed()
    now = time.time()
    staged = set(store.staged_batches())
    live: set[str] | None = None
    cleaned = []
    for batch_id in sorted(staged | set(store.batch_ids())):
        if version is not None and batch_id <= version:
            manifests = store.manifests(batch_id)
            if batch_id not in staged and len(manifests) <= 1:
                continue  # nothing left over
            if live is None:
                live = _live_files(table)
            published = next(
                (m for m in manifests if m.files and _plain(m) <= live),
                None,
            )
            if published is None:
                if any(m.files for m in manifests):
                    continue  # cannot tell which attempt was published: keep everything
                published = manifests[0] if manifests else None
            if published is not None:
                _tidy(store, table, batch_id, published)
                cleaned.append(batch_id)
        elif batch_id in staged and (latest is None or batch_id > latest):
            intents = store.intents(batch_id)
            if all(now - _modified_at(i.location) >= grace_period for i in intents):
                _delete_files(table, {i.path for i in intents}, batch_id)
                store.drop_intents(batch_id)
                cleaned.append(batch_id)
    if cleaned:
        _log.info("delta-2pc removed staged orphans of batches %s from %s", cleaned, table.url)
    return cleaned


def _live_files(table: Location) -> set[str]:
    delta = check_out(table)
    try:
        if delta is None:
            return set()
        paths = pa.table(delta.get_add_actions(flatten=True)).column("path").to_pylist()
        return {unquote(str(p)) for p in paths}
    finally:
        give_back(table, delta)


def _modified_at(location: Location) -> float:
    info = location.info()
    return 0.0 if info.mtime_ns is None else info.mtime_ns / 1e9
