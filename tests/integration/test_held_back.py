"""Nothing held back silently: an incomplete transaction shows, then fails the query at the bound.

A plain ``writeStream...start()`` after ``install()``: the reader applies the failure policy
itself, and the listener keeps the history in the checkpoint location. ``softDeclineTimeout`` is
short, yet longer than the query's first (empty) batch takes to show up in a progress event.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from conftest import wait_until

import spark_ckpt
from spark_ckpt import cli
from spark_ckpt.errors import CheckpointPolicyError
from spark_ckpt.model.events import DeclineEvent, FailureEvent
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

OLDEST = "transaction '730' (first record 0000000001.jsonl:1)"
BOUND = "12s"


def incomplete_transaction(log: Path) -> None:
    """Transaction 730 ended with 3 change events, of which only 2 were ever written."""
    change = {
        "op": "c",
        "before": None,
        "source": {"schema": "shop", "table": "orders", "ts_ms": 1},
    }
    records: list[dict[str, Any]] = [
        {"status": "BEGIN", "id": "730"},
        *(
            {
                **change,
                "after": {"id": n},
                "transaction": {"id": "730", "total_order": n, "data_collection_order": n},
            }
            for n in (1, 2)
        ),
        {"status": "END", "id": "730", "event_count": 3},
    ]
    log.mkdir()
    (log / "0000000001.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def held_query(spark: SparkSession, tmp_path: Path) -> StreamingQuery:
    return (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("softDeclineTimeout", BOUND)
        .load(str(tmp_path / "log"))
        .writeStream.format("delta-2pc")
        .option("path", str(tmp_path / "table"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def held_back_of(query: StreamingQuery) -> dict[str, Any] | None:
    progress = query.lastProgress
    if progress is None:
        return None
    latest = json.loads(progress["sources"][0]["latestOffset"])
    held = latest.get("heldBack")
    return held if isinstance(held, dict) else None


def status(checkpoint: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    capsys.readouterr()
    assert cli.main(["status", str(checkpoint), *extra]) == 0
    return capsys.readouterr().out


@pytest.mark.quick
def test_an_incomplete_transaction_is_shown_while_it_lasts_then_fails_the_query(
    spark: SparkSession,
    control: spark_ckpt.Control,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Progress event, history and status show 2 changes held by 730; past 12 s it fails, named."""
    incomplete_transaction(tmp_path / "log")
    checkpoint = tmp_path / "ckpt"
    query = held_query(spark, tmp_path)
    began = time.monotonic()
    try:
        wait_until(lambda: held_back_of(query) is not None, 60, "a progress event with heldBack")
        held = held_back_of(query)
        assert held is not None
        assert (held["changes"], held["transactions"], held["oldest"]) == (2, 1, OLDEST)
        assert "has ended but only 2 of its 3 change events" in held["reason"]

        history = HistoryLog(SparkCheckpoint(str(checkpoint)))
        wait_until(
            lambda: any(r.sources and r.sources[0].get("heldBack") for r in history.records()),
            30,
            "the history records the progress event with heldBack",
        )
        # The first decline is the soft one; on a slow machine the hard one (past 12 s) may be
        # recorded too by the time the history is read.
        declined = [d for r in history.records() for d in r.declines]
        assert (declined[0]["kind"], declined[0]["heldBack"]["oldest"]) == ("soft", OLDEST)
        text = status(checkpoint, capsys)
        [line] = [line for line in text.splitlines() if line.startswith("held back")]
        assert "2 changes in 1 open transaction since " in line
        assert "only 2 of its 3 change events have been read" in line
        [shown] = json.loads(status(checkpoint, capsys, "--json"))["heldBack"]
        assert shown["oldest"] == OLDEST
        shown_while = time.monotonic() - began
        assert query.isActive, f"all of it was shown while the query ran ({shown_while:.1f}s)"

        with pytest.raises(CheckpointPolicyError) as info:
            control.await_termination(query, 60)
    finally:
        if query.isActive:
            query.stop()
    message = str(info.value)
    assert "source declined (hard)" in message
    assert f"exceeded softDeclineTimeout={BOUND} without progress" in message
    assert f"the oldest held back is {OLDEST}" in message

    events = HistoryLog(SparkCheckpoint(str(checkpoint))).events()
    declines = [e for e in events if isinstance(e, DeclineEvent)]
    assert declines, "the declines reach the history although no checkpoint completed"
    assert all(d.held is not None and d.held["oldest"] == OLDEST for d in declines)
    assert declines[-1].decline == "hard"
    [failed] = [e for e in events if isinstance(e, FailureEvent)]
    assert OLDEST in failed.message
    text = status(checkpoint, capsys)
    assert "the last: QUERY_FAILED" in text
    assert "held back     2 changes in 1 open transaction" in text
