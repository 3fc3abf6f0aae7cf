"""The mysql incremental snapshot's pure parts: window reconciliation, key ranges, planning.

No server: the planner's chunk bounds and binlog windows are given, the spill is a local
directory. Shared parts (:mod:`spark_ckpt.sources.chunks`) are tested here through the mysql
planner; postgres' own planner tests (``test_incremental_plan.py``) cover them for postgres.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from spark_ckpt.errors import DataLossError
from spark_ckpt.sources.chunk_spill import chunk_files, emit_rows, write_chunk_rows
from spark_ckpt.sources.chunks import (
    ALL_KEYS,
    ChunkBounds,
    IncrementalState,
    Key,
    PendingChunk,
    window_dropped,
)
from spark_ckpt.sources.mysql.binlog_offset import BinlogOffset, BinlogPosition
from spark_ckpt.sources.mysql.chunks import ChunkRead, _where, key_text
from spark_ckpt.sources.mysql.incremental import check_windows_kept
from spark_ckpt.sources.mysql.incremental_plan import ChunkPlanner, Window, WindowChange
from spark_ckpt.sources.mysql.schemas import ColumnsSignature
from spark_ckpt.sources.mysql.types import BINARY_CHARSET, FieldType, MySqlColumn
from spark_ckpt.state.storage import Location

TABLE = "db.t"


def test_a_window_drops_every_key_it_changed_and_both_keys_of_a_key_change() -> None:
    assert window_dropped([]) == frozenset()
    changes = [('{"id":1}', None), ('{"id":9}', '{"id":2}'), ('{"id":1}', None)]
    assert window_dropped(changes) == frozenset({'{"id":1}', '{"id":9}', '{"id":2}'})
    assert ALL_KEYS in window_dropped([(ALL_KEYS, None)])


def test_binlog_positions_order_as_integers_across_files_and_back() -> None:
    a = BinlogPosition("mariadb-bin.000009", 4_000_000)
    b = BinlogPosition("mariadb-bin.000010", 4)
    assert a < b
    assert a.ordinal < b.ordinal
    assert BinlogPosition.from_ordinal(b.ordinal, a) == b
    assert BinlogPosition.from_ordinal(a.ordinal, b) == a
    state = IncrementalState(
        1, ("7",), 3, (PendingChunk(ChunkBounds(TABLE, 2, None, ("7",)), a.ordinal, 5),)
    )
    offset = BinlogOffset(5, 12, b, "0-1-3", None, incremental=state)
    assert BinlogOffset.from_json(offset.to_json()) == offset
    assert offset.to_json()["snapshot"]["pending"][0]["since"] == a.ordinal


def test_key_ranges_compare_each_column_as_its_type_in_key_order() -> None:
    """``(a, b) > (x, y)`` spelt as nested comparisons: an index range on both servers."""
    columns = [
        MySqlColumn("a", FieldType.LONGLONG, unsigned=True),
        MySqlColumn("b", FieldType.NEWDECIMAL, precision=10, scale=2),
        MySqlColumn("c", FieldType.STRING, charset=BINARY_CHARSET, length=4),
    ]
    after: Key = ("18446744073709551615", "1.50", "00ff")
    sql, params = _where(columns, after, None)
    assert sql == (
        " WHERE ((`a` > %s) OR (`a` = %s AND `b` > CAST(%s AS DECIMAL(10,2))) OR "
        "(`a` = %s AND `b` = CAST(%s AS DECIMAL(10,2)) AND `c` > UNHEX(%s)))"
    )
    # An unsigned BIGINT above 2^63 passed as an integer: a string would compare as a double.
    assert params[0] == 18446744073709551615
    assert isinstance(params[0], int)
    sql, params = _where(columns[:1], ("3",), ("9",))
    assert sql == " WHERE ((`a` > %s)) AND NOT ((`a` > %s))"
    assert params == [3, 9]
    assert _where(columns, None, None) == ("", [])
    assert key_text(b"\x00\xff") == "00ff"
    assert key_text(Decimal("1E+2")) == "100"


def _spill(directory: Location, chunk: PendingChunk, ids: list[int], read: ChunkRead) -> None:
    keys = pa.array([f'{{"id":{i}}}' for i in ids], pa.string())
    afters = pa.array([f'{{"id":{i},"v":"x"}}' for i in ids], pa.string())
    rows_file, read_file = chunk_files(directory, chunk)
    write_chunk_rows(rows_file, keys, afters)
    read_file.write_bytes(read.to_bytes())


def _planner(
    directory: Location,
    window: list[WindowChange],
    bounds: list[ChunkBounds] | None = None,
    streamed: dict[str, ColumnsSignature] | None = None,
    catalog: dict[str, ColumnsSignature] | None = None,
) -> ChunkPlanner:
    """A planner over ``window``'s changes.

    ``streamed``: the stream's columns at every window's end; ``catalog``: the server's now.
    """
    planned = list(bounds or [])

    def next_bounds(table: str, index: int, after: Key | None, rows: int) -> ChunkBounds:
        found = planned.pop(0)
        assert (table, index, after, rows) == (found.table, found.index, found.after, 3)
        return found

    def changes(since: int, upto: int) -> Window:
        # As the binlog gives them: transactions ending in (since, upto].
        return Window([c for c in window if since < c[0] <= upto], streamed or {})

    def catalog_columns(table: str) -> ColumnsSignature:
        assert catalog is not None, "the catalog was asked although no chunk's columns differ"
        return catalog[table]

    return ChunkPlanner(
        "mysql:h:3306",
        [TABLE],
        directory,
        3,
        2,
        next_bounds,
        changes,
        lambda chunk: chunk,
        catalog_columns=catalog_columns,
    )


def test_chunks_are_planned_read_then_emitted_past_their_watermark_without_window_keys(
    tmp_path: Path,
) -> None:
    """Two chunks planned at 100; read with watermarks 150..200; emitted once read past 200.

    Key 2 changed at 160 (inside both chunks' windows) and key 12 moved to 40 at 170: both left
    out. Key 3 changed at 90, before the windows: the reads saw it, kept. A batch run again
    after a restart drops the same keys and places the chunks at the same position.
    """
    directory = Location(str(tmp_path))
    a_bounds = ChunkBounds(TABLE, 0, None, ("10",))
    b_bounds = ChunkBounds(TABLE, 1, ("10",), None)
    plan = _planner(directory, [], [a_bounds, b_bounds])
    first = plan.plan(IncrementalState(), 100, 100, 100, 1, 0)
    a, b = first.state.pending
    assert (a.bounds, a.since, a.read_in) == (a_bounds, 100, 1)
    assert first.reads == [a, b]
    assert not first.emits
    assert first.state.planning_done(1)
    assert not first.state.finished(1)

    _spill(directory, a, [1, 2, 3], ChunkRead(3, 150, 200, 7))
    _spill(directory, b, [11, 12], ChunkRead(2, 150, 200, 7))
    window: list[WindowChange] = [
        (90, TABLE, '{"id":3}', None),
        (160, TABLE, '{"id":2}', None),
        (170, TABLE, '{"id":40}', '{"id":12}'),
        (170, "db.other", '{"id":1}', None),
    ]
    waiting = _planner(directory, window).plan(first.state, 120, 180, 190, 2, 5)
    assert not waiting.emitted
    assert waiting.state.pending == first.state.pending

    done = _planner(directory, window).plan(first.state, 180, 190, 250, 3, 5)
    assert [c.name for c in done.emitted] == [a.name, b.name]
    assert done.position == 200  # at the highest watermark, past the stream part's end
    assert [e.dropped for e in done.emits] == [
        frozenset({'{"id":2}', '{"id":40}', '{"id":12}'})
    ] * 2
    assert [(e.size, e.txn_order) for e in done.emits] == [(2, 5), (1, 6)]
    assert done.state.finished(1)
    assert done.state.rows_done == 3
    rows = pa.Table.from_batches(list(emit_rows(done.emits[1])))
    assert rows.column("key").to_pylist() == ['{"id":11}']
    assert rows.column("op").to_pylist() == ["r"]

    again = _planner(directory, window).replan(first.state, done.state, done.position, 3, 5)
    assert [(e.dropped, e.size, e.txn_order) for e in again.emits] == [
        (e.dropped, e.size, e.txn_order) for e in done.emits
    ]


def test_a_window_starts_at_the_planning_batch_when_the_read_is_later(tmp_path: Path) -> None:
    """A change between the batch's start (100) and the read's low watermark (150) is dropped.

    On MySQL a commit is in the binlog a moment before it is visible.
    """
    directory = Location(str(tmp_path))
    chunk = PendingChunk(ChunkBounds(TABLE, 0, None, None), 100, 1)
    _spill(directory, chunk, [1, 2], ChunkRead(2, 150, 160, 7))
    window: list[WindowChange] = [(120, TABLE, '{"id":1}', None)]
    state = IncrementalState(table=1, pending=(chunk,))
    work = _planner(directory, window).plan(state, 200, 200, 200, 2, 0)
    assert work.emits[0].dropped == frozenset({'{"id":1}'})
    assert work.emits[0].size == 1


def test_a_chunk_whose_spill_was_lost_is_read_again_from_the_new_batch(tmp_path: Path) -> None:
    directory = Location(str(tmp_path))
    chunk = PendingChunk(ChunkBounds(TABLE, 0, None, None), 100, 1)
    state = IncrementalState(table=1, pending=(chunk,))
    work = _planner(directory, []).plan(state, 300, 300, 300, 4, 0)
    assert not work.emitted
    assert [(c.since, c.read_in) for c in work.state.pending] == [(300, 4)]
    assert [c.name for c in work.reads] == [chunk.name]  # type: ignore[attr-defined]


def test_a_restart_whose_pending_windows_start_in_a_purged_file_is_a_data_loss_error() -> None:
    at = BinlogPosition("mariadb-bin.000007", 900)
    window = BinlogPosition("mariadb-bin.000005", 4)
    chunk = PendingChunk(ChunkBounds(TABLE, 3, ("9",), ("20",)), window.ordinal, read_in=4)
    state = IncrementalState(table=0, after=("20",), index=4, pending=(chunk,), chunks_done=3)
    restored = BinlogOffset(5, 0, at, "0-1-40", incremental=state)
    kept = ["mariadb-bin.000005", "mariadb-bin.000006", "mariadb-bin.000007"]
    check_windows_kept(restored, kept)  # the window's file is there: nothing to say
    check_windows_kept(BinlogOffset(5, 0, at, "0-1-40"), kept[2:])  # no chunk pending
    with pytest.raises(DataLossError, match="chunked snapshot") as lost:
        check_windows_kept(restored, kept[1:])
    assert "mariadb-bin.000005:4" in str(lost.value)
    assert "mariadb-bin.000006 to mariadb-bin.000007" in str(lost.value)


def test_a_chunk_whose_table_changed_schema_in_its_window_is_read_again(tmp_path: Path) -> None:
    """An ALTER TABLE between a chunk's read and its placement: its rows have the old columns.

    The chunk is not emitted but read again from the new batch's start; the other table's
    chunk, whose window holds no schema change of its table, emits. A logged batch planned
    again emits what it emitted.
    """
    directory = Location(str(tmp_path))
    altered = PendingChunk(ChunkBounds(TABLE, 0, None, None), 100, 1)
    other = PendingChunk(ChunkBounds("db.other", 0, None, None), 100, 1)
    _spill(directory, altered, [1, 2], ChunkRead(2, 150, 160, 7))
    _spill(directory, other, [5], ChunkRead(1, 150, 160, 7))
    window: list[WindowChange] = [(170, TABLE, None, None), (175, "db.other", '{"id":6}', None)]
    state = IncrementalState(table=1, pending=(altered, other))
    work = _planner(directory, window).plan(state, 200, 200, 200, 2, 0)
    assert [c.name for c in work.emitted] == [other.name]
    assert [e.table for e in work.emits] == ["db.other"]
    # From the schema change on (170), not the batch's start: its next window holds it no more.
    assert [(c.name, c.since, c.read_in) for c in work.state.pending] == [(altered.name, 170, 2)]
    assert [c.name for c in work.reads] == [altered.name]  # type: ignore[attr-defined]
    assert work.state.chunks_done == 1
    again = _planner(directory, window).replan(state, work.state, work.position, 2, 0)
    assert [e.table for e in again.emits] == ["db.other"]


BEFORE: ColumnsSignature = (("id", "int", "int"), ("v", "string", "text"))
AFTER: ColumnsSignature = (*BEFORE, ("tier", "string", "varchar"))


def test_a_chunk_read_before_a_change_the_stream_followed_earlier_is_read_again(
    tmp_path: Path,
) -> None:
    """The chunk's rows have the columns of before an ALTER TABLE the stream has followed.

    Read (100..160) before the change, which the stream followed in an earlier batch than this
    one (its first row event there, at 140): decoded again with this batch's schemas, the window
    shows no change, but the read's columns are neither the stream's at the placement nor the
    catalog's. Read again; a read with the new columns is then placed, and so is one read after
    a change no row event has shown yet (the catalog's columns: the stream's change comes with
    the table's next row event), and one spilled before reads recorded their columns.
    """
    directory = Location(str(tmp_path))
    stale = PendingChunk(ChunkBounds(TABLE, 0, None, None), 100, 1)
    _spill(directory, stale, [1, 2], ChunkRead(2, 100, 160, 7, BEFORE))
    state = IncrementalState(table=1, pending=(stale,))
    window: list[WindowChange] = [(140, TABLE, '{"id":9}', None)]
    streamed, catalog = {TABLE: AFTER}, {TABLE: AFTER}
    work = _planner(directory, window, streamed=streamed, catalog=catalog).plan(
        state, 200, 200, 200, 2, 0
    )
    assert not work.emitted
    assert [(c.name, c.since, c.read_in) for c in work.state.pending] == [(stale.name, 200, 2)]
    assert [c.name for c in work.reads] == [stale.name]  # type: ignore[attr-defined]

    again = work.state.pending[0]
    _spill(directory, again, [1, 2], ChunkRead(2, 210, 220, 8, AFTER))
    placed = _planner(directory, [], streamed=streamed, catalog=catalog).plan(
        work.state, 230, 230, 230, 3, 0
    )
    assert [c.name for c in placed.emitted] == [again.name]

    for read in (ChunkRead(2, 210, 220, 8, AFTER), ChunkRead(2, 210, 220, 8)):
        _spill(directory, again, [1, 2], read)
        ahead = _planner(directory, [], streamed={TABLE: BEFORE}, catalog=catalog)
        assert [c.name for c in ahead.plan(work.state, 230, 230, 230, 3, 0).emitted] == [again.name]


def test_a_read_records_its_columns_and_one_without_them_still_parses() -> None:
    read = ChunkRead(2, 100, 160, 7, AFTER)
    assert ChunkRead.from_bytes(read.to_bytes()) == read
    older = b'{"high": 160, "low": 100, "readAtUs": 7, "rows": 2}'
    assert ChunkRead.from_bytes(older) == ChunkRead(2, 100, 160, 7)
