"""Delta snapshots kept between publishes: exclusive to one user, always brought up to date."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from spark_ckpt.sinks.snapshots import check_out, give_back
from spark_ckpt.state.storage import Location


def append(table: Location, value: int) -> None:
    """A commit by another writer (another process, as far as the snapshot knows)."""
    write_deltalake(table.url, pa.table({"x": [value]}), mode="append")


def test_no_table_is_none_and_nothing_is_kept(tmp_path: Path) -> None:
    table = Location(str(tmp_path / "t"))
    assert check_out(table) is None
    give_back(table, None)
    assert check_out(table) is None


def test_a_kept_snapshot_is_updated_before_it_is_handed_out(tmp_path: Path) -> None:
    table = Location(str(tmp_path / "t"))
    append(table, 1)
    first = check_out(table)
    assert first is not None
    assert first.version() == 0
    give_back(table, first)
    append(table, 2)  # lands after the snapshot was kept

    again = check_out(table)
    assert again is first, "the kept snapshot is reused"
    assert again.version() == 1, "and sees the commit that landed since"
    give_back(table, again)


def test_a_checked_out_snapshot_belongs_to_one_user(tmp_path: Path) -> None:
    """A publisher commits against the snapshot it read: nobody else may move it meanwhile."""
    table = Location(str(tmp_path / "t"))
    append(table, 1)
    mine = check_out(table)
    other = check_out(table)
    assert mine is not None
    assert other is not None
    assert mine is not other
    append(table, 2)
    assert mine.version() == 0, "a checked-out snapshot moves only when its user moves it"
    give_back(table, other)
    give_back(table, mine)
