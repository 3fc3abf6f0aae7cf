"""The checkpoint listener, driven with real event objects built by fromJson (no JVM)."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path

import pytest
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
)

from spark_ckpt.model.events import DeclineEvent
from spark_ckpt.spark.listener import CheckpointListener
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.state.registry import ControlState, Registration
from spark_ckpt.state.storage_options import StorageOptions

QUERY = str(uuid.UUID(int=7))
RUN = str(uuid.UUID(int=8))


def started(run: str = RUN) -> QueryStartedEvent:
    return QueryStartedEvent.fromJson(
        {"id": QUERY, "runId": run, "name": None, "timestamp": "2026-11-21T00:00:00.000Z"}
    )


def progress(batch_id: int, source: str | None = None) -> QueryProgressEvent:
    """Batch ``batch_id``'s progress event; with ``source``, a txn-cdc source of that identity."""
    sources = []
    if source is not None:
        sources.append(
            {
                "description": "txn-cdc",
                "startOffset": None,
                "endOffset": json.dumps({"checkpoint": batch_id}),
                "latestOffset": json.dumps({"identity": source}),
                "numInputRows": 0,
                "inputRowsPerSecond": 0.0,
                "processedRowsPerSecond": 0.0,
            }
        )
    return QueryProgressEvent.fromJson(
        {
            "progress": {
                "id": QUERY,
                "runId": RUN,
                "name": None,
                "timestamp": "2026-11-21T00:00:00.000Z",
                "batchId": batch_id,
                "batchDuration": 10,
                "stateOperators": [],
                "sources": sources,
                "sink": {"description": "delta-2pc", "numOutputRows": 1},
            }
        }
    )


def terminated(exception: str | None = None, run: str = RUN) -> QueryTerminatedEvent:
    return QueryTerminatedEvent.fromJson(
        {"id": QUERY, "runId": run, "exception": exception, "errorClassOnException": None}
    )


class Calls:
    def __init__(self) -> None:
        self.seen: list[int | None] = []
        self.done = threading.Event()
        self.fail_on: set[int | None] = set()

    def __call__(
        self, registration: Registration, batch_id: int | None, run_id: str | None
    ) -> None:
        assert registration.table == "/t"
        assert run_id == RUN, "the hook learns which run of the query the event came from"
        self.seen.append(batch_id)
        if batch_id in self.fail_on:
            raise OSError("disk full")


@pytest.fixture
def state(tmp_path: Path) -> ControlState:
    state = ControlState(str(tmp_path))
    state.register(Registration("delta-2pc", QUERY, "", "/t"))
    return state


def test_hooks_run_after_each_progress_event_and_after_termination(state: ControlState) -> None:
    """Completed checkpoints and the end of the query reach the registered hook, in order."""
    calls = Calls()
    listener = CheckpointListener(state, {"delta-2pc": calls})
    listener.onQueryStarted(started())
    listener.onQueryProgress(progress(0))
    listener.onQueryProgress(progress(1))
    listener.onQueryTerminated(terminated())
    assert listener.finished(RUN).wait(10), "termination hooks did not run"
    assert calls.seen == [0, 1, None]
    assert listener.final_error(RUN) is None


def test_queries_without_registrations_are_left_alone(tmp_path: Path) -> None:
    """A query that registered nothing runs no hook but still signals its end."""
    calls = Calls()
    listener = CheckpointListener(ControlState(str(tmp_path)), {"delta-2pc": calls})
    listener.onQueryStarted(started())
    listener.onQueryProgress(progress(0))
    listener.onQueryTerminated(terminated())
    assert listener.finished(RUN).wait(10)
    assert calls.seen == []


def test_hook_failures_are_kept_and_a_failed_final_hook_is_reported(state: ControlState) -> None:
    """A failing hook does not stop the listener; the final one's error is kept for the query."""
    calls = Calls()
    calls.fail_on = {0, None}
    listener = CheckpointListener(state, {"delta-2pc": calls})
    listener.onQueryStarted(started())
    listener.onQueryProgress(progress(0))
    listener.onQueryProgress(progress(1))
    listener.onQueryTerminated(terminated())
    assert listener.finished(RUN).wait(10)
    assert calls.seen == [0, 1, None]
    assert [(q, b) for q, b, _ in listener.errors] == [(QUERY, 0), (QUERY, None)]
    assert isinstance(listener.final_error(RUN), OSError)
    second = str(uuid.UUID(int=9))
    listener.onQueryStarted(started(second))  # a restart has no final error of its own yet
    assert listener.final_error(second) is None
    assert isinstance(listener.final_error(RUN), OSError)


class Restores:
    """A restore callable recording the queries it restored; fails its first ``failures`` calls."""

    def __init__(self, failures: int = 0) -> None:
        self.seen: list[str] = []
        self.failures = failures

    def __call__(self, query_id: str) -> None:
        self.seen.append(query_id)
        if len(self.seen) <= self.failures:
            raise OSError(f"store unreachable (call {len(self.seen)})")


def test_each_start_restores_the_query_before_its_first_trigger(state: ControlState) -> None:
    """The restore runs inside onQueryStarted (Spark's query thread), not on the worker later."""
    restores = Restores()
    listener = CheckpointListener(state, {}, restore=restores)
    listener.onQueryStarted(started())
    assert restores.seen == [QUERY], "restored only later: a first batch could race it"
    listener.onQueryTerminated(terminated())
    assert listener.finished(RUN).wait(10)
    assert restores.seen == [QUERY], "a restore that succeeded is not repeated at the end"
    assert listener.final_error(RUN) is None


def test_a_failed_restore_is_retried_when_the_run_ends(state: ControlState) -> None:
    """A start never fails from the listener; the run's end retries, and succeeds here."""
    restores = Restores(failures=1)
    listener = CheckpointListener(state, {}, restore=restores)
    listener.onQueryStarted(started())
    listener.onQueryTerminated(terminated())
    assert listener.finished(RUN).wait(10)
    assert restores.seen == [QUERY, QUERY]
    assert [(q, b) for q, b, _ in listener.errors] == [(QUERY, None)]
    assert listener.final_error(RUN) is None


def test_a_restore_failing_at_start_and_end_is_the_runs_final_error(state: ControlState) -> None:
    """What a killed run left unpublished must not end the next run as if all were published."""
    restores = Restores(failures=2)
    listener = CheckpointListener(state, {}, restore=restores)
    listener.onQueryStarted(started())
    listener.onQueryTerminated(terminated())
    assert listener.finished(RUN).wait(10)
    failure = listener.final_error(RUN)
    assert isinstance(failure, OSError)
    assert "call 2" in str(failure)


def test_a_failed_restore_is_not_retried_once_a_later_run_started(state: ControlState) -> None:
    """The later run restored the query as it started; a retry could discard what it stages."""
    restores = Restores(failures=1)
    listener = CheckpointListener(state, {}, restore=restores)
    listener.onQueryStarted(started())
    later = str(uuid.UUID(int=10))
    listener.onQueryStarted(started(later))  # before the first run's termination arrives
    listener.onQueryTerminated(terminated())
    assert listener.finished(RUN).wait(10)
    assert restores.seen == [QUERY, QUERY], "the first run's end restored again"
    assert listener.final_error(RUN) is None


def test_registration_is_idempotent(state: ControlState) -> None:
    """Registering the same component again changes nothing."""
    state.register(Registration("delta-2pc", QUERY, "", "/t"))
    assert state.registrations(QUERY) == [Registration("delta-2pc", QUERY, "", "/t")]


def test_a_runs_final_publish_does_not_signal_the_next_run_of_the_query(
    state: ControlState,
) -> None:
    """Stopped, then started again on its checkpoint (same query id) while its tail publishes.

    The first run's final hook ends after the second run started: the second run's waiters
    (``Control.await_termination``) must still wait for the second run's own final hook.
    """
    second = str(uuid.UUID(int=9))
    release = threading.Event()
    finals: list[str | None] = []

    def hook(registration: Registration, batch_id: int | None, run_id: str | None) -> None:
        if batch_id is None:
            if run_id == RUN:
                assert release.wait(10), "the test never released the first run's final hook"
            finals.append(run_id)

    listener = CheckpointListener(state, {"delta-2pc": hook})
    listener.onQueryStarted(started())
    listener.onQueryTerminated(terminated())
    first_done = listener.finished(RUN)
    listener.onQueryStarted(started(second))
    second_done = listener.finished(second)
    release.set()
    assert first_done.wait(10), "the first run's final hook did not finish"
    assert finals == [RUN]
    assert not second_done.is_set(), "the second run was signalled by the first run's hook"
    listener.onQueryTerminated(terminated(run=second))
    assert second_done.wait(10), "the second run's final hook did not finish"
    assert finals == [RUN, second]


def test_a_runs_termination_delivered_after_the_next_run_started_does_not_signal_it(
    state: ControlState,
) -> None:
    """Spark posts a run's start to listeners synchronously, its termination through the bus.

    Stopped and started again at once, a query's old run may be reported terminated after its
    new run started: the old run's final hook must not tell the new run's waiters that their
    tail is published (it did, keyed by query id, and a bounded run's waiter read the table
    before its last batch was published).
    """
    second = str(uuid.UUID(int=9))
    finals: list[str | None] = []

    def hook(registration: Registration, batch_id: int | None, run_id: str | None) -> None:
        if batch_id is None:
            finals.append(run_id)

    listener = CheckpointListener(state, {"delta-2pc": hook})
    listener.onQueryStarted(started())
    listener.onQueryStarted(started(second))  # before the first run's termination arrives
    listener.onQueryTerminated(terminated())
    assert listener.finished(RUN).wait(10), "the first run's final hook did not finish"
    assert finals == [RUN]
    assert not listener.finished(second).is_set(), "the new run was signalled by the old one"
    listener.onQueryTerminated(terminated(run=second))
    assert listener.finished(second).wait(10), "the second run's final hook did not finish"
    assert finals == [RUN, second]


def test_a_registration_keeps_its_checkpoint_and_table_typed(tmp_path: Path) -> None:
    """The hooks and the listener receive the location, the table and the storage as written."""
    state = ControlState(str(tmp_path / "state"))
    storage = StorageOptions.of({"AWS_REGION": "eu-west-1"})
    state.register(Registration("delta-2pc", QUERY, "s3://b/ckpt", "s3://b/t", storage))
    (found,) = state.registrations(QUERY)
    assert (found.checkpoint_location, found.table) == ("s3://b/ckpt", "s3://b/t")
    assert found.storage.get("AWS_REGION") == "eu-west-1"
    assert found.checkpoint().location == "s3://b/ckpt"
    # A file an earlier version wrote (a settings object) reads the same.
    earlier = {
        "kind": "delta-2pc",
        "settings": {"checkpointLocation": "/c", "path": "/t", "storage": {}},
    }
    assert Registration.from_json(QUERY, earlier) == Registration("delta-2pc", QUERY, "/c", "/t")


def test_idle_events_move_an_unsupervised_sources_declines_into_the_history(
    tmp_path: Path,
) -> None:
    """A source holding everything back runs no batch; its declines still reach the history."""
    state = ControlState(str(tmp_path / "state"))
    checkpoint = tmp_path / "ckpt"
    state.register(Registration("delta-2pc", QUERY, str(checkpoint), str(tmp_path / "t")))
    listener = CheckpointListener(state, {})
    listener.onQueryProgress(progress(0, source="query-0123456789ab"))
    held = {"changes": 2, "transactions": 1, "oldest": "T1", "reason": "T1 waits"}
    state.record_pending("query-0123456789ab", DeclineEvent(1, "soft", "T1 waits", held))
    listener.onQueryIdle(
        QueryIdleEvent.fromJson({"id": QUERY, "runId": RUN, "timestamp": "2026-11-21T00:00:01Z"})
    )
    listener._worker.submit(lambda: None).result(timeout=30)  # the worker ran what came before
    declines = [
        e
        for e in HistoryLog(SparkCheckpoint(str(checkpoint))).events()
        if isinstance(e, DeclineEvent)
    ]
    assert [(d.checkpoint, d.held) for d in declines] == [(1, held)]
