"""The control plane's restore of each starting query: which queries, which checkpoint (no JVM).

``_restorer`` learns a query's checkpoint root and sink from the JVM (``query_target``); a fake
lookup stands in for it here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spark_ckpt.spark.control import _restorer
from spark_ckpt.state.registry import ControlState
from spark_ckpt.state.restore import RestorePoint


class Lookup:
    """What the JVM would say of each active query: (checkpoint root, sink name)."""

    def __init__(self, targets: dict[str, tuple[str, str]]) -> None:
        self.targets = targets

    def __call__(self, spark: Any, query_id: str) -> tuple[str, str] | None:
        return self.targets.get(query_id)


def restorer(
    tmp_path: Path, targets: dict[str, tuple[str, str]]
) -> tuple[Callable[[str], None], Lookup, list[RestorePoint]]:
    """A restorer with the delta-2pc handler recording what it is told, and its lookup."""
    seen: list[RestorePoint] = []
    lookup = Lookup(targets)
    state = ControlState(str(tmp_path / "state"))
    restore = _restorer(None, state, {"delta-2pc": seen.append}, lookup)  # type: ignore[arg-type]
    return restore, lookup, seen


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A checkpoint location with no completed batch yet (the restore point is the start)."""
    location = tmp_path / "ckpt"
    (location / "commits").mkdir(parents=True)
    return location


def test_a_query_whose_sink_has_a_restore_handler_is_restored_at_its_checkpoint(
    tmp_path: Path, checkpoint: Path
) -> None:
    restore, _, seen = restorer(tmp_path, {"q": (str(checkpoint), "delta-2pc")})
    restore("q")
    assert [point.checkpoint_location for point in seen] == [str(checkpoint)]
    assert seen[0].checkpoint_id is None


def test_other_queries_of_the_session_are_left_alone(tmp_path: Path, checkpoint: Path) -> None:
    # A noop (or any other) sink: its checkpoint is not read at all, wherever it is.
    targets = {"q": (str(checkpoint), "noop-table"), "s3": ("s3a://b/ckpt", "console")}
    restore, _, seen = restorer(tmp_path, targets)
    restore("q")
    restore("s3")
    assert seen == []


def test_a_retry_after_the_run_ended_uses_the_target_its_start_found(
    tmp_path: Path, checkpoint: Path
) -> None:
    restore, lookup, seen = restorer(tmp_path, {"q": (str(checkpoint), "delta-2pc")})
    restore("q")
    del lookup.targets["q"]  # the run ended: Spark no longer knows the query
    restore("q")
    restore("never-started")
    assert [point.checkpoint_location for point in seen] == [str(checkpoint)] * 2


def test_a_checkpoint_on_a_store_the_storage_layer_cannot_read_is_skipped(tmp_path: Path) -> None:
    targets = {"h": ("hdfs://nn/ckpt", "delta-2pc"), "d": ("dbfs:/ckpt", "delta-2pc")}
    restore, _, seen = restorer(tmp_path, targets)
    restore("h")
    restore("d")
    assert seen == []
