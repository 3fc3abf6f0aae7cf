"""The incremental snapshot's planner on spilled chunks and a given window (no database)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.ipc

from spark_ckpt.sources.postgres.chunks import ChunkBounds
from spark_ckpt.sources.postgres.incremental import (
    ChunkRead,
    IncrementalState,
    PendingChunk,
    chunk_files,
)
from spark_ckpt.sources.postgres.incremental_plan import ChunkPlanner, WindowChange
from spark_ckpt.sources.postgres.tables import TableInfo
from spark_ckpt.sources.postgres.visibility import ChunkSnapshot
from spark_ckpt.state.storage import Location

TABLE = TableInfo("public.t", "public", "t", (("id", "integer"),), ("id",))
SCHEMA = pa.schema([("key", pa.string()), ("after", pa.string())])


def spill(directory: Location, chunk: PendingChunk, ids: list[int], read: ChunkRead) -> None:
    """What an executor's read of ``chunk`` leaves: its rows, then its read."""
    keys = [f'{{"id":{i}}}' for i in ids]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_batch(pa.record_batch([pa.array(keys), pa.array(keys)], schema=SCHEMA))
    rows_file, read_file = chunk_files(directory, chunk)
    rows_file.write_bytes(sink.getvalue().to_pybytes())
    read_file.write_bytes(read.to_bytes())


def planner(directory: Location, window: list[WindowChange]) -> ChunkPlanner:
    def changes(since: int, upto: int) -> list[WindowChange]:
        # As the slot gives them: transactions committing in (since, upto].
        return [c for c in window if since < c[0] <= upto]

    def no_connection() -> psycopg.Connection[Any]:
        raise AssertionError("no chunk is planned in these tests")

    return ChunkPlanner(
        "dsn",
        "postgres:s",
        "s",
        [TABLE],
        directory,
        2,
        2,
        no_connection,
        changes,
        describe=lambda name: TABLE,  # a table read again after a schema change
    )


def test_each_chunk_is_reconciled_with_its_own_window(tmp_path: Path) -> None:
    """A re-run of the batch drops the same keys, whichever chunks were ready with it.

    Chunk B's window starts at 200. Transaction 7 committed at 150 (before B's window) and B's
    read did not see it (a commit that became visible late): B must be read again, not emitted
    with 7's key reconciled by chance through chunk A's earlier window. Transaction 9 (at 250,
    unseen by B) drops key 12 from B, and only from B.
    """
    directory = Location(str(tmp_path))
    a = PendingChunk(ChunkBounds("public.t", 0, None, ("10",)), since=100, read_in=1)
    b = PendingChunk(ChunkBounds("public.t", 1, ("10",), None), since=200, read_in=2)
    seen_all_but = ChunkSnapshot.parse("5:20:7,9", high_watermark=300)
    spill(directory, a, [1, 2, 3], ChunkRead(3, ChunkSnapshot.parse("5:20:", 300), 0))
    spill(directory, b, [11, 12, 13], ChunkRead(3, seen_all_but, 0, racing=(7,)))
    window: list[WindowChange] = [
        (150, 7, "public.t", '{"id":11}', None),
        (250, 9, "public.t", '{"id":12}', None),
    ]
    work = planner(directory, window).plan(
        IncrementalState(table=1, pending=(a, b)), 300, 300, 400, 3, 0
    )
    assert [c.name for c in work.emitted] == [a.name]  # B waits for a new read
    assert work.emits[0].dropped == frozenset()  # A saw both transactions
    assert [(c.name, c.since) for c in work.state.pending] == [(b.name, 300)]

    # Now A must be read again (a racing transaction outside any window) and B is emitted
    # without key 12. Were B reconciled with the batch's window from A's start, 7 would drop
    # key 11 too; the batch re-run after a restart (B alone gone from the pending chunks) must
    # drop exactly the same keys as the first run.
    spill(directory, a, [1, 2, 3], ChunkRead(3, ChunkSnapshot.parse("5:20:", 300), 0, (99,)))
    spill(directory, b, [11, 12, 13], ChunkRead(3, seen_all_but, 0))
    state = IncrementalState(table=1, pending=(a, b))
    first = planner(directory, window).plan(state, 300, 300, 400, 3, 0)
    assert [c.name for c in first.emitted] == [b.name]
    again = planner(directory, window).replan(state, first.state, first.position, 3, 0)
    assert first.emits[0].dropped == again.emits[0].dropped == frozenset({'{"id":12}'})
    assert first.emits[0].size == again.emits[0].size == 2
    assert first.position == again.position == 300


def test_a_tables_new_read_ends_with_its_last_chunk_and_the_end_row(tmp_path: Path) -> None:
    """A table read again after a schema change (place 1 in the sequence after ``public.t``).

    Its two chunks are ready together; the last one is empty after its dropped key, yet its
    unit carries the ``rebuild='end'`` row, on the first run and on a re-run alike. A chunk of
    the read that waits for its watermark keeps the end back.
    """
    directory = Location(str(tmp_path))
    a = PendingChunk(ChunkBounds("public.t", 0, None, ("10",)), 100, 1, rebuild=1)
    b = PendingChunk(ChunkBounds("public.t", 1, ("10",), None), 100, 1, rebuild=1)
    assert a.name == "public.t-r1-000000"
    assert PendingChunk.from_json(a.to_json()) == a
    snapshot = ChunkSnapshot.parse("5:20:9", 300)
    spill(directory, a, [1, 2], ChunkRead(2, snapshot, 0))
    spill(directory, b, [12], ChunkRead(1, snapshot, 0))
    window: list[WindowChange] = [(250, 9, "public.t", '{"id":12}', None)]
    state = IncrementalState(table=2, pending=(a, b), rebuild=("public.t",))
    assert IncrementalState.from_json(state.to_json()) == state
    plan = planner(directory, window)
    work = plan.plan(state, 300, 300, 400, 3, 0)
    assert work.state.finished(1)
    assert [(e.size, e.closing is not None) for e in work.emits] == [(2, False), (0, True)]
    closing = work.emits[1].closing
    assert closing is not None
    assert '"rebuild":"end"' in closing[1]
    again = plan.replan(state, work.state, work.position, 3, 0)
    assert [(e.size, e.closing) for e in again.emits] == [(e.size, e.closing) for e in work.emits]

    waiting = ChunkSnapshot.parse("5:20:", 900)  # b's watermark is beyond the stream's reach
    spill(directory, b, [12], ChunkRead(1, waiting, 0))
    work = planner(directory, window).plan(state, 300, 300, 400, 3, 0)
    assert [c.name for c in work.emitted] == [a.name]
    assert all(e.closing is None for e in work.emits)


def test_a_read_superseded_by_a_newer_one_of_its_table_emits_nothing_and_no_end(
    tmp_path: Path,
) -> None:
    """A second schema change during a table's new read queued another read of it (place 2)."""
    directory = Location(str(tmp_path))
    a = PendingChunk(ChunkBounds("public.t", 0, None, None), 100, 1, rebuild=1)
    spill(directory, a, [1, 2], ChunkRead(2, ChunkSnapshot.parse("5:20:", 300), 0))
    state = IncrementalState(table=3, pending=(a,), rebuild=("public.t", "public.t"))
    assert state.superseded(a.read, 1)
    assert not state.superseded(("public.t", 2), 1)
    work = planner(directory, []).plan(state, 300, 300, 400, 3, 0)
    assert work.emitted == [a]
    assert work.emits == []  # neither its rows nor an end that would close the newer read
