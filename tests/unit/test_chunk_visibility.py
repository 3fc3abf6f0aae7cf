"""The incremental snapshot's watermark rule, checked against a model of MVCC and the WAL."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_ckpt.errors import StateFormatError
from spark_ckpt.sources.postgres.visibility import ChunkSnapshot, dropped_keys


def test_snapshot_text_and_visibility_in_the_circular_xid_space() -> None:
    snapshot = ChunkSnapshot.parse("4294967290:4294967300:4294967295,4294967297", 99)
    # 64-bit xids map to the stream's 32-bit ones; 4294967300 wraps to 4.
    assert (snapshot.xmin, snapshot.xmax) == (4294967290, 4)
    assert snapshot.xip == frozenset({4294967295, 1})
    assert snapshot.saw(4294967291)
    assert not snapshot.saw(4294967295)  # in progress
    assert snapshot.saw(0)  # after the wrap, before xmax
    assert not snapshot.saw(1)  # in progress
    assert snapshot.saw(3)
    assert not snapshot.saw(4)  # xmax itself had not started
    assert not snapshot.saw(5000)
    assert ChunkSnapshot.from_json(snapshot.to_json()) == snapshot  # type: ignore[arg-type]
    with pytest.raises(StateFormatError, match="pg_current_snapshot"):
        ChunkSnapshot.parse("12:x:", 0)


def test_keys_changed_by_unseen_transactions_are_dropped_old_keys_too() -> None:
    snapshot = ChunkSnapshot.parse("100:105:102", 0)
    changes = [
        (101, '{"id":1}', None),  # seen
        (102, '{"id":2}', None),  # in progress at the snapshot
        (107, '{"id":9}', '{"id":3}'),  # after it: a key update moved row 3 to 9
    ]
    assert dropped_keys(snapshot, changes) == {'{"id":2}', '{"id":9}', '{"id":3}'}


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[tuple[int, dict[int, int | None]]], set[int], int]:
    """Transactions in commit (WAL) order, which of them a snapshot saw, and the position P.

    Visibility follows commit order except near the snapshot, where a transaction whose commit
    record is already in the WAL may not be visible yet (PostgreSQL removes it from the proc
    array after writing the record); every transaction after the high watermark is unseen.
    """
    keys = draw(st.integers(1, 6))
    count = draw(st.integers(0, 12))
    txns = []
    for index in range(count):
        writes = draw(
            st.dictionaries(
                st.integers(0, keys - 1), st.one_of(st.none(), st.just(index)), max_size=3
            )
        )
        txns.append((1000 + draw(st.integers(0, 50)) * 100 + index, writes))
    cut = draw(st.integers(0, count))  # the snapshot: committed before it, in WAL order
    racing = draw(st.sets(st.integers(0, max(cut - 1, 0)), max_size=2)) if cut else set()
    seen = {i for i in range(cut) if i not in racing}
    position = draw(st.integers(cut, count))  # P: at or after the high watermark
    return txns, seen, position


@settings(max_examples=400, deadline=None)
@given(histories())
def test_a_consumer_never_goes_back_and_ends_with_the_truth(
    history: tuple[list[tuple[int, dict[int, int | None]]], set[int], int],
) -> None:
    txns, seen, position = history
    initial = -1  # every key exists before the slot, as version -1
    keys = {k for _, writes in txns for k in writes} | {0}
    # The chunk's rows: the initial rows with the seen transactions applied, in commit order.
    chunk: dict[int, int | None] = dict.fromkeys(keys, initial)
    for index, (_, writes) in enumerate(txns):
        if index in seen:
            chunk.update(writes)
    xids_seen = {txns[i][0] for i in seen}
    in_progress = ",".join(str(x) for x, _ in txns if x not in xids_seen and x < 10**7)
    snapshot = ChunkSnapshot.parse(f"1:{10**7}:{in_progress}", 0)
    assert all(snapshot.saw(txns[i][0]) for i in seen)
    changes = [(xid, str(k), None) for xid, writes in txns[:position] for k in writes]
    dropped = dropped_keys(snapshot, changes)
    # The consumer: the stream in commit order, the chunk's rows at P.
    state: dict[int, int | None] = {}
    order: dict[int, int] = {}  # the newest version applied per key, to catch going back

    def apply(key: int, value: int | None, version: int) -> None:
        assert version >= order.get(key, -2), f"key {key} went back to version {version}"
        order[key] = version
        state[key] = value

    for index, (_, writes) in enumerate(txns):
        if index == position:
            for key, value in chunk.items():
                if str(key) not in dropped:
                    newest = max([i for i in seen if key in txns[i][1]], default=initial)
                    apply(key, value, newest)
        for key, value in writes.items():
            apply(key, value, index)
    if position == len(txns):
        for key, value in chunk.items():
            if str(key) not in dropped:
                newest = max([i for i in seen if key in txns[i][1]], default=initial)
                apply(key, value, newest)
    truth: dict[int, int | None] = dict.fromkeys(keys, initial)
    for _, writes in txns:
        truth.update(writes)
    for key in keys:
        # A key the chunk left out and no change reached stays unknown: it must not exist then.
        assert state.get(key, "unknown") in (truth[key], "unknown")
        if key in state or truth[key] is not None:
            assert state.get(key) == truth[key], key
