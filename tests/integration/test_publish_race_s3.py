"""Two publishers of the same mirror batch, racing against the S3 server, batch after batch.

Whichever publisher finishes batch N first deletes N's folded changes once N is in the change
log; one that started on N before that must then take the vanished file for "N is published",
not fail. On a local disk the file is gone at the open. On S3 pyarrow opens with a HEAD request
and reads with GETs, so the object can vanish *between* the open and a read, and the error comes
from the read (issue 30: ``AWS Error NO_SUCH_KEY during GetObject`` from ``pq.read_table``, in a
writer's recovery).

The publishers are the sink's own :func:`publish_completed`, as a writer's recovery and the
control plane's listener run it, in processes of their own, without Spark. Each reaches the
server through a link of its own (a TCP relay on loopback) that holds back its GETs of staged
objects for a random moment, as a loaded machine stalls a reader between the open and the read.
In each round one publisher, chosen at random, is the late reader: its link holds its GETs of
staged objects until the other's link has passed the deletion of the batch's staging (bounded
by :data:`LATE_READ_BOUND`). So the late reader opens the folded file, the other finishes the
batch and deletes it, and only then does the late reader read. The links count those stale
reads: the test races on until it has seen one, or it would prove nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import multiprocessing
import random
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from multiprocessing.queues import Queue
from pathlib import Path
from queue import Empty
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Schema

from harness.delta_reads import read_delta
from harness.servers.s3 import S3Server
from spark_ckpt.sinks import publisher
from spark_ckpt.sinks.manifest import Manifest, ManifestStore
from spark_ckpt.sinks.mirror.precommit import plan_batch
from spark_ckpt.sinks.publisher import precommit, publish_completed
from spark_ckpt.sinks.staging import staged_name, write_staged_file
from spark_ckpt.sources.schema import ARROW_SCHEMA
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.mirrors import CHECKPOINTS_TABLE, STAGING_DIR
from spark_ckpt.state.storage import Location, StorageOptions

QUERY = "6a1f8f9e-0000-4000-8000-00000000a030"
RUN = "11111111-0000-4000-8000-00000000a030"
MIN_ROUNDS = 6
"""Batches raced at least (about 2 s each against moto, twice that on a loaded machine)."""
MAX_ROUNDS = 20
"""Batches raced at most, while fewer than :data:`STALE_READS` have been seen."""
STALE_READS = 1
"""Reads of a folded file after the other publisher deleted it that make the race proven: one
is the case the test exists for (a publisher that opened the file and found it gone at the
read)."""
HOLD_BACK = 0.5
"""At most this long (seconds) the link of the round's other publisher holds back a GET of a
staged object, so that the two publishers' steps interleave differently from round to round."""
LATE_READ_BOUND = 10.0
"""At most this long (seconds) the late reader's link waits for the other's staging deletion:
a round whose deletion never passes (or passed before the read) goes on without it."""
TABLES = ("s.a", "s.b")
KEYS = 4


class Round:
    """Which publisher reads late in the current round, and whether the other deleted yet."""

    def __init__(self) -> None:
        self.late_reader: int | None = None
        self.staging_deleted = threading.Event()

    def begin(self, late_reader: int) -> None:
        """Start a round whose late reader is publisher ``late_reader`` (test's thread)."""
        self.staging_deleted.clear()
        self.late_reader = late_reader


class SlowLink:
    """A TCP relay to the S3 server that holds back GETs of staged objects for a while.

    One HTTP request per write from the client is all it needs to see (the AWS SDK and delta-rs
    write a bodiless GET's head at once); a request it does not recognise passes at once.
    ``stale_reads`` counts held-back GETs the server answered 404: the object was there at the
    open (the HEAD passed) and gone at the read.

    The round's late reader's link holds each such GET until another link has passed a
    successful ``DeleteObjects`` (pyarrow's ``delete_dir``, which a publisher runs on the
    batch's staging last); the other links hold theirs for a random moment up to
    :data:`HOLD_BACK`.

    Its threads run in the test's process, which only waits while the publishers (processes of
    their own) work.
    """

    def __init__(self, upstream: int, index: int, round_: Round, seed: int) -> None:
        self._upstream = upstream
        self._index = index
        self._round = round_
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.stale_reads = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):  # closed
            while True:
                client, _ = self._listener.accept()
                server = socket.create_connection(("127.0.0.1", self._upstream))
                held = threading.Event()  # the request in flight here was held back
                deleting = threading.Event()  # the request in flight here deletes objects
                for pump in (self._requests, self._answers):
                    threading.Thread(
                        target=pump, args=(client, server, held, deleting), daemon=True
                    ).start()

    def _hold_back(self) -> None:
        if self._round.late_reader == self._index:
            self._round.staging_deleted.wait(LATE_READ_BOUND)
            return
        with self._lock:
            pause = self._random.uniform(0.0, HOLD_BACK)
        time.sleep(pause)

    def _requests(
        self,
        client: socket.socket,
        server: socket.socket,
        held: threading.Event,
        deleting: threading.Event,
    ) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(1 << 16):
                line = data.split(b"\r\n", 1)[0]
                if line[:4] in (b"GET ", b"HEAD", b"PUT ", b"POST", b"DELE"):
                    # A new request on this connection: what the last one was no longer holds.
                    held.clear()
                    deleting.clear()
                    if line.startswith(b"POST ") and b"?delete" in line.split(b" ")[1]:
                        deleting.set()
                if line.startswith(b"GET ") and f"/{STAGING_DIR}/staging/".encode() in line:
                    self._hold_back()
                    held.set()
                server.sendall(data)
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_WR)

    def _answers(
        self,
        client: socket.socket,
        server: socket.socket,
        held: threading.Event,
        deleting: threading.Event,
    ) -> None:
        with contextlib.suppress(OSError):
            while data := server.recv(1 << 16):
                if data.startswith(b"HTTP/1.1 404") and held.is_set():
                    with self._lock:
                        self.stale_reads += 1
                if data.startswith(b"HTTP/1.1 200") and deleting.is_set():
                    self._round.staging_deleted.set()
                client.sendall(data)
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._listener.close()


def _publisher(
    base: str, options: dict[str, str], jobs: Queue[int | None], done: Queue[str]
) -> None:
    """Publish each batch id ``jobs`` brings as soon as it comes (a process of its own).

    Without the publish claim (:mod:`spark_ckpt.sinks.publish_claim`): with it, the publisher
    that comes second waits for the first instead of racing it, and the late reader's link holds
    its reads until the other's deletion, which waits for the late reader: the race this test
    exists for is the one publishers run when no claim holds them apart (a claimant gone, a
    store without create-if-absent), and the race must stay safe then.
    """
    publisher.claim = lambda store, batch_id, run: False  # type: ignore[attr-defined]
    storage = StorageOptions.of(options)
    store = ManifestStore(SparkCheckpoint(f"{base}/ckpt", storage))
    table = Location(f"{base}/table", storage)
    while (batch_id := jobs.get()) is not None:
        try:
            publish_completed(store, table, upto=batch_id)
        except BaseException:  # the test reports it
            done.put(traceback.format_exc())
        else:
            done.put("")


class Publishers:
    """Publisher processes, each reaching the S3 server through a :class:`SlowLink` of its own.

    Processes, not threads: delta-rs holds the interpreter lock while it waits for the store, so
    publishers on threads of one process would take turns instead of racing.
    """

    def __init__(self, base: str, server: S3Server | None, count: int, seed: int) -> None:
        context = multiprocessing.get_context("spawn")
        # No server: the publishers race on a local disk, without links.
        self.round = Round()
        self.links = (
            []
            if server is None
            else [SlowLink(server.port, i, self.round, seed * 31 + i) for i in range(count)]
        )
        self._jobs: list[Queue[int | None]] = [context.Queue() for _ in range(count)]
        self._done: Queue[str] = context.Queue()
        self._processes = []
        for index, jobs in enumerate(self._jobs):
            options: dict[str, str] = {}
            if server is not None:
                link = self.links[index]
                options = {**server.options(), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{link.port}"}
            process = context.Process(
                target=_publisher, args=(base, options, jobs, self._done), daemon=True
            )
            process.start()
            self._processes.append(process)

    def race(self, batch_id: int, timeout: float) -> list[str]:
        """All publish up to ``batch_id`` at once; return the tracebacks of those that failed."""
        for jobs in self._jobs:
            jobs.put(batch_id)
        deadline = time.monotonic() + timeout
        outcomes = []
        for _ in self._processes:
            try:
                outcomes.append(self._done.get(timeout=max(0.0, deadline - time.monotonic())))
            except Empty:
                raise AssertionError(f"a publisher did not return within {timeout:.0f}s") from None
        return [failure for failure in outcomes if failure]

    @property
    def stale_reads(self) -> int:
        """Held-back GETs of staged objects that found the object gone, on every link."""
        return sum(link.stale_reads for link in self.links)

    def close(self) -> None:
        for jobs in self._jobs:
            jobs.put(None)
        for process in self._processes:
            process.join(30)
            if process.is_alive():
                process.kill()
        for link in self.links:
            link.close()


def change_rows(batch_id: int, new_column: bool = False) -> pa.Table:
    """Batch N: every table upserts key N mod KEYS to N (the change stream's columns).

    With ``new_column``, batch N's rows also bring a column ``cN`` the mirrors never had (and
    the columns earlier batches brought: an insert carries every column its table has).
    """
    columns: dict[str, list[Any]] = {f.name: [] for f in ARROW_SCHEMA}
    key = batch_id % KEYS
    after: dict[str, Any] = {"id": key, "v": batch_id}
    types = {"id": "bigint", "v": "bigint"}
    if new_column:
        for n in range(batch_id + 1):
            after[f"c{n}"] = n
            types[f"c{n}"] = "bigint"
    for index, table in enumerate(TABLES):
        values = {
            "source": "race",
            "txn_id": f"t{batch_id}",
            "txn_order": 1,
            "txn_size": len(TABLES),
            "event_index": index,
            "commit_ts": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
            "table": table,
            "op": "u" if batch_id >= KEYS else "c",
            "key": json.dumps({"id": key}),
            "before": None,
            "after": json.dumps(after),
        }
        for name, value in values.items():
            columns[name].append(value)
    rows = pa.Table.from_pydict(columns, schema=ARROW_SCHEMA)
    return rows.append_column("column_types", pa.array([json.dumps(types)] * rows.num_rows))


class Query:
    """A checkpoint, a change log and a mirror root on the S3 server, staged as the sink does."""

    def __init__(self, base: str, options: StorageOptions) -> None:
        self.base = base
        self.options = options
        self.ckpt = Location(f"{base}/ckpt", options)
        self.ckpt.child("metadata").write_bytes(json.dumps({"id": QUERY}).encode() + b"\n")
        self.table = Location(f"{base}/table", options)
        self.mirror = Location(f"{base}/mirror", options)
        self.store = ManifestStore(SparkCheckpoint(self.ckpt))

    def stage(self, batch_id: int, new_column: bool = False) -> None:
        """Batch N's pre-commit (fold, stage, manifest), then Spark's ``commits/N``."""
        rows = change_rows(batch_id, new_column)
        staged = write_staged_file(self.table, staged_name(QUERY, batch_id, 0), rows)
        plan = plan_batch(self.mirror, self.table, [staged], QUERY, batch_id, RUN)
        schema = Schema.from_arrow(rows.schema).to_json()
        manifest = Manifest(batch_id, QUERY, self.table.uri, schema, (), (staged,), RUN, plan)
        precommit(self.store, manifest)
        self.ckpt.child("commits", str(batch_id)).write_bytes(b"v1\n{}\n")

    def stage_append(self, batch_id: int) -> None:
        """Batch N for an append-mode sink (no mirrors), its rows bringing a new column ``cN``."""
        rows = change_rows(batch_id)
        rows = rows.append_column(f"c{batch_id}", pa.array([batch_id] * rows.num_rows))
        staged = write_staged_file(self.table, staged_name(QUERY, batch_id, 0), rows)
        schema = Schema.from_arrow(rows.schema).to_json()
        manifest = Manifest(batch_id, QUERY, self.table.uri, schema, (), (staged,), RUN)
        precommit(self.store, manifest)
        self.ckpt.child("commits", str(batch_id)).write_bytes(b"v1\n{}\n")

    def delta(self, location: Location) -> DeltaTable:
        return DeltaTable(location.url, storage_options=location.delta_options())


@pytest.mark.timeout(240)
def test_two_publishers_of_one_mirror_batch_on_s3_both_succeed_and_publish_it_once(
    s3_server: S3Server, s3_bucket: str
) -> None:
    """Each batch reaches every mirror, the index and the change log once; neither racer fails."""
    seed = random.randrange(1 << 30)
    query = Query(
        f"s3://{s3_bucket}/{uuid.uuid4().hex[:8]}", StorageOptions.of(s3_server.options())
    )
    expected: dict[int, int] = {}
    publishers = Publishers(query.base, s3_server, 2, seed)
    rounds = 0
    late_readers = random.Random(seed)
    try:
        while rounds < MIN_ROUNDS or (publishers.stale_reads < STALE_READS and rounds < MAX_ROUNDS):
            batch_id = rounds
            query.stage(batch_id)
            publishers.round.begin(late_readers.randrange(len(publishers.links)))
            failures = publishers.race(batch_id, timeout=60)
            if failures:
                pytest.fail(
                    f"batch {batch_id} (seed {seed}, {publishers.stale_reads} stale reads so "
                    f"far): a publisher failed:\n{failures[0]}"
                )
            expected[batch_id % KEYS] = batch_id
            rounds += 1
        stale_reads = publishers.stale_reads
    finally:
        publishers.close()

    assert stale_reads >= 1, (
        f"in {rounds} rounds (seed {seed}) no publisher read a folded file after the other had "
        f"deleted it: the race was never run (does the staging's deletion still pass as a "
        f"DeleteObjects?)"
    )
    changes = query.delta(query.table)
    batches = [h.get("spark-ckpt.batchId") for h in reversed(changes.history())]
    assert batches == list(range(rounds)), "the change log holds each batch once, in order"
    assert changes.to_pyarrow_table().num_rows == rounds * len(TABLES)
    for name in TABLES:
        location = query.mirror.child(name)
        mirror = query.delta(location)
        stored = read_delta(location.url, storage_options=location.delta_options())
        rows = {r["id"]: r["v"] for r in stored.to_pylist()}
        assert rows == expected, f"mirror {name}"
        assert mirror.transaction_version(QUERY) == rounds - 1
    index = query.delta(query.mirror.child(CHECKPOINTS_TABLE))
    assert index.transaction_version(QUERY) == rounds - 1
    assert not query.mirror.child(STAGING_DIR, "staging").list(recursive=True), (
        "a batch's folded changes are deleted once it is published"
    )


SCHEMA_ROUNDS = 16
"""Batches raced in the schema-change race (well under a second each on a local disk)."""


def race_on_disk(query: Query, stage: Callable[[int], None]) -> None:
    """Stage batch after batch with ``stage`` and have two publishers race on each; none fails."""
    publishers = Publishers(query.base, None, 2, seed=0)
    try:
        for batch_id in range(SCHEMA_ROUNDS):
            stage(batch_id)
            failures = publishers.race(batch_id, timeout=60)
            assert not failures, f"batch {batch_id}: a publisher failed:\n{failures[0]}"
    finally:
        publishers.close()


@pytest.mark.timeout(240)
def test_two_publishers_of_batches_that_add_columns_both_succeed_and_publish_each_once(
    tmp_path: Path,
) -> None:
    """A batch that adds a column is two commits per table; the racer between them must wait.

    Publishing a batch with new columns commits the schema change first (metadata only), then
    the batch. A publisher whose commit meets the other's schema change finds the batch not yet
    in the table: it must try again on the new snapshot, not fail (seen in CI: "Metadata
    changed since last commit" failed a restarted MariaDB mirror query's writer).
    """
    query = Query(str(tmp_path), StorageOptions.of({}))
    race_on_disk(query, lambda batch_id: query.stage(batch_id, new_column=True))
    changes = query.delta(query.table)
    batches = [h.get("spark-ckpt.batchId") for h in reversed(changes.history())]
    assert batches == list(range(SCHEMA_ROUNDS)), "the change log holds each batch once, in order"
    added = {f"c{n}" for n in range(SCHEMA_ROUNDS)}
    for name in TABLES:
        mirror = query.delta(query.mirror.child(name))
        assert added <= set(mirror.schema().to_arrow().names), f"mirror {name}: a column is lost"
        data = [h for h in mirror.history() if h.get("spark-ckpt.batchId") is not None]
        assert len(data) == SCHEMA_ROUNDS, f"mirror {name}: each batch is one data commit"
        assert mirror.transaction_version(QUERY) == SCHEMA_ROUNDS - 1


@pytest.mark.timeout(240)
def test_two_publishers_of_append_batches_that_add_columns_both_succeed_and_publish_each_once(
    tmp_path: Path,
) -> None:
    """The change log's side of the race above: an append-mode batch that adds a column."""
    query = Query(str(tmp_path), StorageOptions.of({}))
    race_on_disk(query, query.stage_append)
    changes = query.delta(query.table)
    data = [h.get("spark-ckpt.batchId") for h in reversed(changes.history())]
    assert [b for b in data if b is not None] == list(range(SCHEMA_ROUNDS)), (
        "the change log holds each batch once, in order"
    )
    added = {f"c{n}" for n in range(SCHEMA_ROUNDS)}
    assert added <= set(changes.schema().to_arrow().names), "a column is lost"
    assert changes.to_pyarrow_table().num_rows == SCHEMA_ROUNDS * len(TABLES)
