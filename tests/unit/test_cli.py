"""The ``spark-ckpt`` console script, run as a user runs it (a subprocess), on a made history.

The history is written through :class:`HistoryLog` exactly as the control plane writes it; the
integration tests run the same command against a real query's checkpoint.
"""

from __future__ import annotations

import datetime
import json
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import Schema

from spark_ckpt.model.events import (
    CompletedEvent,
    DeclineEvent,
    FailureEvent,
    PublishedEvent,
    StartEvent,
)
from spark_ckpt.sinks.manifest import Manifest, ManifestStore
from spark_ckpt.sinks.publisher import precommit, publish_completed
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog
from spark_ckpt.state.storage import Location

SCRIPT = Path(sys.executable).with_name("spark-ckpt")
T0 = datetime.datetime(2026, 11, 23, 10, 0, tzinfo=datetime.timezone.utc).timestamp()
"""The history's clock: batch 0 is triggered at T0 + 0, as its progress event says."""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), f"the console script is not installed next to {sys.executable}"
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=120, check=False
    )


def offsets(start: int, end: int) -> dict[str, object]:
    return {
        "description": "txn-cdc",
        "startOffset": json.dumps({"emitted": start}),
        "endOffset": json.dumps({"emitted": end}),
    }


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A checkpoint location whose history has two published batches, a decline, a failure."""
    location = tmp_path / "ckpt"
    location.mkdir()
    history = HistoryLog(SparkCheckpoint(str(location)))
    history.append(StartEvent(1, None, at=T0 + 0))
    history.append(
        CompletedEvent(0, "2026-11-23T10:00:00.000Z", 1500, 40, (offsets(0, 5),), at=T0 + 1.9)
    )
    history.append(PublishedEvent(0, 0, "/lake/t", at=T0 + 1.75))
    history.append(DeclineEvent(1, "soft", "transaction 6 is still open", at=T0 + 2))
    history.append(
        CompletedEvent(1, "2026-11-23T10:00:02.000Z", 2200, 12, (offsets(5, 9),), at=T0 + 4.2)
    )
    history.append(FailureEvent(2, "QUERY_FAILED", "executor lost", at=T0 + 5))
    history.append(StartEvent(2, 1, at=T0 + 6))
    history.append(PublishedEvent(1, 1, "/lake/t", at=T0 + 6.5))
    return location


def test_history_prints_one_line_per_checkpoint(checkpoint: Path) -> None:
    done = run("history", str(checkpoint))
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.splitlines()
    assert header.split()[:3] == ["batch", "transactions", "rows"]
    assert [line.split()[0] for line in lines] == ["0", "1", "2"]
    first, second, third = lines
    assert "0-4" in first, "txn_order of the first and last transaction"
    assert " v0 " in first
    assert "250ms" in first, "published 0.25 s after it completed"
    assert "declined (soft): transaction 6 is still open" in second
    assert "restarted from here x1" in second
    assert "2.30s" in second, "published by the restarted run, 2.3 s after it completed"
    assert "failed: QUERY_FAILED" in third
    assert "not completed" in third


def test_history_json_parses_back(checkpoint: Path) -> None:
    done = run("history", str(checkpoint), "--json")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["checkpoint_id"] for r in records] == [0, 1, 2]
    assert records[0]["delta_version"] == 0
    assert records[0]["transactions"] == [0, 4]
    assert records[0]["publishLatency"] == pytest.approx(0.25)
    assert records[1]["restarts"] == 1
    assert records[2]["failures"][0]["reason"] == "QUERY_FAILED"


def test_status_reports_completed_in_flight_published_pending_and_staged(tmp_path: Path) -> None:
    query = "6a1f8f9e-0000-4000-8000-0000000000c1"
    ckpt, table = Location(str(tmp_path / "ckpt")), Location(str(tmp_path / "table"))
    ckpt.child("metadata").write_bytes(json.dumps({"id": query}).encode() + b"\n")
    checkpoint = SparkCheckpoint(ckpt)
    store = ManifestStore(checkpoint)
    store.record_table(table.url)
    schema = Schema.from_arrow(pa.schema([("id", pa.int64())])).to_json()
    for batch in range(3):  # Spark planned 0-2, completed 0-1; 0 is published
        ckpt.child("offsets", str(batch)).write_bytes(b"v1\n{}\n{}\n")
        precommit(store, Manifest(batch, query, table.url, schema, (), (), "run-1"))
    for batch in (0, 1):
        ckpt.child("commits", str(batch)).write_bytes(b"v1\n{}\n")
    assert publish_completed(store, table, upto=0) == [0]
    history = HistoryLog(checkpoint)
    history.append(StartEvent(1, None))
    history.append(FailureEvent(1, "CHECKPOINT_DECLINED", "source declined"))
    history.append(StartEvent(2, 0))

    done = run("status", str(ckpt.url), "--json")
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout)
    assert state["queryId"] == query
    assert (state["lastCompleted"], state["inFlight"]) == (1, [2])
    assert (state["starts"], state["lastStart"]["restored"]) == (2, 0)
    assert state["lastFailure"]["reason"] == "CHECKPOINT_DECLINED"
    sink = state["sinks"]["delta-2pc"]
    assert (sink["published"], sink["pending"], sink["staged"]) == (0, [1], [2])

    text = run("status", str(ckpt.url))
    assert text.returncode == 0, text.stderr
    assert "published up to batch 0 (table version 0); pending: 1; staged: 2" in text.stdout
    assert "the last: CHECKPOINT_DECLINED" in text.stdout


HELD = {
    "changes": 12,
    "transactions": 1,
    "oldest": "transaction '730' (first record 0000000002.jsonl:0)",
    "sinceMs": round((T0 + 4) * 1000),
    "lastProgressMs": round((T0 + 4) * 1000),
    "reason": "transaction '730' (first record 0000000002.jsonl:0) has ended but only 2 of its "
    "3 change events have been read; 0 later-ended transaction(s) wait behind it",
}


def held_source(held: dict[str, object] | None) -> dict[str, object]:
    return {**offsets(0, 5), "latestOffset": json.dumps({"heldBack": held})}


def test_status_says_what_is_held_back_while_no_checkpoint_completes(tmp_path: Path) -> None:
    """The newest decline's heldBack: how much, in how many transactions, since when, and why."""
    location = tmp_path / "ckpt"
    history = HistoryLog(SparkCheckpoint(str(location)))
    progress = {"batchId": 0, "timestamp": "2026-11-23T10:00:00.000Z"}
    completed = CompletedEvent.of_progress({**progress, "sources": [held_source(None)]})
    history.append(replace(completed, at=T0 + 1))
    history.append(DeclineEvent(1, "soft", str(HELD["reason"]), HELD, at=T0 + 134))

    text = run("status", str(location))
    assert text.returncode == 0, text.stderr
    [line] = [line for line in text.stdout.splitlines() if line.startswith("held back")]
    assert line == (
        "held back     12 changes in 1 open transaction since 2026-11-23 10:00:04 UTC (2m 10s, "
        f"as of 10:02:14): {HELD['reason']}"
    )
    done = run("status", str(location), "--json")
    assert done.returncode == 0, done.stderr
    [held] = json.loads(done.stdout)["heldBack"]
    assert held == {**HELD, "checkpoint": 1, "at": T0 + 134}


def test_status_shows_nothing_held_back_once_a_later_checkpoint_reports_none(
    tmp_path: Path,
) -> None:
    """A completed checkpoint after the decline, holding nothing back, supersedes it."""
    location = tmp_path / "ckpt"
    history = HistoryLog(SparkCheckpoint(str(location)))
    history.append(DeclineEvent(1, "soft", "r", HELD, at=T0 + 1))
    progress = {"batchId": 1, "timestamp": "2026-11-23T10:00:02.000Z"}
    completed = CompletedEvent.of_progress({**progress, "sources": [held_source(None)]})
    history.append(replace(completed, at=T0 + 2))
    done = run("status", str(location), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["heldBack"] == []
    assert "held back" not in run("status", str(location)).stdout


def test_plot_writes_a_timeline_png(checkpoint: Path, tmp_path: Path) -> None:
    target = tmp_path / "out" / "history.png"
    done = run("plot", str(checkpoint), "-o", str(target))
    assert done.returncode == 0, done.stderr
    png = target.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk comes first
    assert (width, height) == (1100, 600)
    assert len(png) > 20_000, "two panels with lines, marks and labels are not a blank image"


def test_plot_of_an_empty_history_is_an_error(tmp_path: Path) -> None:
    done = run("plot", str(tmp_path), "-o", str(tmp_path / "x.png"))
    assert done.returncode == 1
    assert "no history to plot" in done.stderr
    assert not (tmp_path / "x.png").exists()


def test_errors_are_one_line_and_a_non_zero_status(tmp_path: Path) -> None:
    missing = run("history", str(tmp_path / "nowhere"))
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        f"spark-ckpt: error: no checkpoint location at {tmp_path / 'nowhere'}"
    ]
    bad = run("history", str(tmp_path), "--storage-option", "AWS_REGION")
    assert bad.returncode == 1
    assert "expects KEY=VALUE" in bad.stderr
    usage = run()
    assert usage.returncode == 2, "a usage error, as argparse reports it"
    assert "usage: spark-ckpt" in usage.stderr


def test_version_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    import spark_ckpt

    assert spark_ckpt.__version__ == version("spark-ckpt")
    result = run("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"spark-ckpt {version('spark-ckpt')}"


def test_status_names_the_newest_schema_changes_a_source_reported(tmp_path: Path) -> None:
    location = tmp_path / "ckpt"
    history = HistoryLog(SparkCheckpoint(Location(str(location))))
    changed = {
        **offsets(0, 5),
        "status": {
            "connector": "debezium-json",
            "schemaChanges": ["public.products: column_added note (- -> string)"],
        },
    }
    quiet = {**offsets(5, 9), "status": {"connector": "debezium-json", "schemaChanges": None}}
    history.append(CompletedEvent(0, "2026-11-23T10:00:00.000Z", 1500, 4, (changed,), at=T0 + 1))
    history.append(CompletedEvent(1, "2026-11-23T10:00:02.000Z", 900, 4, (quiet,), at=T0 + 3))
    done = run("status", str(location), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schemaChanges"]["checkpoint"] == 0
    text = run("status", str(location)).stdout
    assert "schema        public.products: column_added note (- -> string) (batch 0" in text
    assert "source        debezium-json (at batch 1" in text  # no slot: not a postgres source
