"""pgoutput decoding (pure): messages built as PostgreSQL's protocol documentation lays them out."""

from __future__ import annotations

import json
import struct

import pytest

from spark_ckpt.errors import ChangeDecodeError
from spark_ckpt.sources.postgres.decoding.pgoutput import (
    decode_transactions,
    render_change,
    truncate_change,
)
from spark_ckpt.sources.postgres.decoding.relations import RelationCatalog
from spark_ckpt.sources.postgres.lsn import parse_lsn
from spark_ckpt.sources.postgres.values import timestamp_micros

_PG_EPOCH_US = 946_684_800_000_000
TYPES = {(23, -1): "integer", (1700, 2621454): "numeric(40,10)", (25, -1): "text"}
TYPES[(701, -1)] = "double precision"


def cstring(text: str) -> bytes:
    return text.encode() + b"\x00"


def relation(relid: int, table: str, columns: list[tuple[str, int, int, bool]]) -> bytes:
    schema, name = table.split(".")
    body = b"R" + struct.pack(">I", relid) + cstring(schema) + cstring(name) + b"d"
    body += struct.pack(">h", len(columns))
    for column, oid, typmod, key in columns:
        body += bytes([1 if key else 0]) + cstring(column) + struct.pack(">Ii", oid, typmod)
    return body


def tuple_data(values: list[str | bool | None]) -> bytes:
    body = struct.pack(">h", len(values))
    for value in values:
        if value is None:
            body += b"n"
        elif value is False:
            body += b"u"
        else:
            raw = str(value).encode()
            body += b"t" + struct.pack(">i", len(raw)) + raw
    return body


def begin(xid: int) -> bytes:
    return b"B" + struct.pack(">QqI", 0, 0, xid)


def commit(commit_lsn: str, end_lsn: str, at: str) -> bytes:
    micros = timestamp_micros(at)
    assert micros is not None
    return (
        b"C"
        + b"\x00"
        + struct.pack(">QQq", parse_lsn(commit_lsn), parse_lsn(end_lsn), micros - _PG_EPOCH_US)
    )


COLUMNS = [
    ("id", 23, -1, True),
    ("amount", 1700, 2621454, False),
    ("note", 25, -1, False),
    ("f", 701, -1, False),
]


def catalog() -> RelationCatalog:
    return RelationCatalog(lambda oid, mod: TYPES[(oid, mod)], lambda table: ("id",))


def rows(*messages: bytes) -> list[tuple[str, int | None, bytes]]:
    return [(f"0/{100 + i:X}", None, m) for i, m in enumerate(messages)]


def test_transactions_group_with_their_relations_and_commit_positions() -> None:
    insert = b"I" + struct.pack(">I", 16400) + b"N" + tuple_data(["1", "12.5", "a", "NaN"])
    other = b"I" + struct.pack(">I", 16500) + b"N" + tuple_data(["9"])
    messages = rows(
        begin(725),
        relation(16400, "public.t", COLUMNS),
        insert,
        relation(16500, "public.other", [("id", 23, -1, True)]),
        other,
        commit("0/15261D8", "0/1526208", "2026-11-22 01:31:09.621437+00"),
        b"M\x00" + struct.pack(">Q", 0) + cstring("spark-ckpt-heartbeat") + b"\x00\x00\x00\x00",
        begin(726),
    )
    known = catalog()
    txns = list(decode_transactions(messages, known, frozenset({"public.t"})))
    assert [t.xid for t in txns] == [725, 0]  # the heartbeat; 726 has no commit yet
    first = txns[0]
    assert first.changes == [insert]  # public.other is not captured
    assert [known.versions[i].table for i in first.relations] == ["public.t"]
    assert (first.commit_lsn, first.end_lsn) == (parse_lsn("0/15261D8"), parse_lsn("0/1526208"))
    assert first.commit_ts_us == timestamp_micros("2026-11-22 01:31:09.621437+00")
    assert txns[1].end_lsn == parse_lsn(messages[6][0])


def test_changes_render_like_the_wal2json_path() -> None:
    known = catalog()
    known.learn(relation(16400, "public.t", COLUMNS))
    table = known.versions[0]
    insert = (
        b"I"
        + struct.pack(">I", 16400)
        + b"N"
        + tuple_data(["1", "12.5000000000", None, "-Infinity"])
    )
    assert render_change(insert, table) == (
        "public.t",
        "c",
        '{"id":1}',
        None,
        '{"id":1,"amount":"12.5000000000","note":null,"f":"-Infinity"}',
    )
    # An update that leaves the key alone: the identity comes from the new row; an unchanged
    # TOASTed value is left out, as wal2json leaves it out.
    update = b"U" + struct.pack(">I", 16400) + b"N" + tuple_data(["1", "0.1", False, "0.1"])
    assert render_change(update, table)[1:] == (
        "u",
        '{"id":1}',
        '{"id":1}',
        '{"id":1,"amount":"0.1","f":0.1}',
    )
    # The key changed: the old key comes first ('K': only identity columns count).
    moved = (
        b"U"
        + struct.pack(">I", 16400)
        + b"K"
        + tuple_data(["1", None, None, None])
        + b"N"
        + tuple_data(["2", "1", "x", "1"])
    )
    assert render_change(moved, table)[2:4] == ('{"id":2}', '{"id":1}')
    delete = b"D" + struct.pack(">I", 16400) + b"K" + tuple_data(["2", None, None, None])
    assert render_change(delete, table)[1:] == ("d", '{"id":2}', '{"id":2}', None)
    # REPLICA IDENTITY FULL: 'O' carries the whole old row.
    full = b"D" + struct.pack(">I", 16400) + b"O" + tuple_data(["3", "7", "é", "2"])
    assert json.loads(render_change(full, table)[3] or "") == {
        "id": 3,
        "amount": "7",
        "note": "é",
        "f": 2.0,
    }
    assert render_change(truncate_change(16400), table) == ("public.t", "t", None, None, None)


def test_a_truncate_of_several_tables_is_one_change_per_captured_table() -> None:
    known = catalog()
    truncate = b"T" + struct.pack(">i", 2) + b"\x00" + struct.pack(">II", 16400, 16500)
    messages = rows(
        begin(9),
        relation(16400, "public.t", COLUMNS),
        relation(16500, "public.other", [("id", 23, -1, True)]),
        truncate,
        commit("0/2", "0/3", "2026-11-22 01:31:09+00"),
    )
    (txn,) = decode_transactions(messages, known, frozenset({"public.t", "public.other"}))
    assert txn.changes == [truncate_change(16400), truncate_change(16500)]
    assert [known.versions[i].table for i in txn.relations] == ["public.t", "public.other"]


def test_a_schema_change_is_a_new_relation_version_and_an_unknown_one_an_error() -> None:
    known = catalog()
    known.learn(relation(16400, "public.t", COLUMNS[:2]))
    known.learn(relation(16400, "public.t", COLUMNS))
    known.learn(relation(16400, "public.t", COLUMNS[:2]))
    assert len(known.versions) == 2
    assert known.current[16400] == 0
    stray = b"I" + struct.pack(">I", 7) + b"N" + tuple_data(["1"])
    with pytest.raises(ChangeDecodeError, match=r"relation 7 .* before describing it"):
        list(decode_transactions(rows(begin(1), stray), known, frozenset({"public.t"})))
