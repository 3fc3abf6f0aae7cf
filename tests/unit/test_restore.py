"""Restore points (FLINK-20396): the exact checkpoint a query resumes from."""

from __future__ import annotations

import json
from pathlib import Path

from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.restore import RestorePoint, notify_restore, restore_point


def spark_checkpoint(root: Path, logged: int, committed: int) -> SparkCheckpoint:
    """A checkpoint directory as Spark writes it: offsets 0..logged-1, commits 0..committed-1."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text('{"id":"q"}\n')
    for batch in range(logged):
        (root / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":0}}\n{{"checkpoint":{batch}}}\n{{"other":{batch}}}\n'
        )
    for batch in range(committed):
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    return SparkCheckpoint(str(root))


def test_a_new_query_restores_nothing(tmp_path: Path) -> None:
    point = restore_point(SparkCheckpoint(str(tmp_path / "none")))
    assert (point.checkpoint_id, point.rerun_batch, point.source_offsets) == (None, None, ())
    assert point.next_batch == 0


def test_resumes_from_the_newest_commit_and_names_the_batch_to_rerun(tmp_path: Path) -> None:
    point = restore_point(spark_checkpoint(tmp_path / "c", logged=4, committed=3))
    assert point.checkpoint_id == 2
    assert point.rerun_batch == 3  # offsets/3 is logged, commits/3 is not
    assert point.next_batch == 3
    assert point.source_offsets == ('{"checkpoint":2}', '{"other":2}')


def test_no_rerun_when_the_next_batch_was_never_logged(tmp_path: Path) -> None:
    point = restore_point(spark_checkpoint(tmp_path / "c", logged=2, committed=2))
    assert (point.checkpoint_id, point.rerun_batch) == (1, None)


def test_handlers_are_told_in_name_order_and_only_for_existing_locations(tmp_path: Path) -> None:
    told: list[tuple[str, int | None]] = []
    handlers = {
        "b": lambda p: told.append(("b", p.checkpoint_id)),
        "a": lambda p: told.append(("a", p.checkpoint_id)),
    }
    notify_restore(RestorePoint(str(tmp_path / "missing"), None, None, ()), handlers)
    assert told == []
    point = restore_point(spark_checkpoint(tmp_path / "c", logged=1, committed=1))
    notify_restore(point, handlers)
    assert told == [("a", 0), ("b", 0)]


def test_a_restore_point_round_trips_through_json(tmp_path: Path) -> None:
    """The point handed to a query's sources reads back as it was written."""
    point = restore_point(spark_checkpoint(tmp_path / "c", logged=4, committed=3))
    assert RestorePoint.from_json(json.loads(json.dumps(point.to_json()))) == point
