"""The postgres connector's pure parts: LSNs, wal2json decoding, values, offsets, options, DSNs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.references.wal2json import decode_change
from spark_ckpt.errors import (
    ConfigError,
    InvalidOptionError,
    LogRewrittenError,
)
from spark_ckpt.sources.options import SourceOptions
from spark_ckpt.sources.postgres.connect import redact_dsn, scrub
from spark_ckpt.sources.postgres.decoding.wal2json import decode_transactions
from spark_ckpt.sources.postgres.lsn import format_lsn, parse_lsn
from spark_ckpt.sources.postgres.options import PostgresOptions
from spark_ckpt.sources.postgres.pg_offset import PgOffset
from spark_ckpt.sources.postgres.tables import parse_text_value
from spark_ckpt.sources.postgres.values import NumberText, normalize_value, timestamp_micros
from spark_ckpt.sources.snapshot_progress import SnapshotProgress

# Rows as a PostgreSQL 15 server with wal2json 2.5 printed them (format-version 2).
ROWS = [
    (
        "0/1526050",
        725,
        '{"action":"B","xid":725,"timestamp":"2026-11-22 01:31:09.621437+00",'
        '"lsn":"0/15261D8","nextlsn":"0/1526208"}',
    ),
    (
        "0/1526050",
        725,
        '{"action":"I","xid":725,"timestamp":"2026-11-22 01:31:09.621437+00",'
        '"lsn":"0/1526050","schema":"public","table":"t","columns":[{"name":"id","type":"integer",'
        '"value":1},{"name":"amount","type":"numeric(30,10)","value":12345678901234567890.1234567891},'
        '{"name":"ts","type":"timestamp with time zone","value":"2025-12-31 22:00:00.123456+00"},'
        '{"name":"note","type":"text","value":"a\\"b\\\\c\\nd \u00e9"}],'
        '"pk":[{"name":"id","type":"integer"}]}',
    ),
    (
        "0/1526208",
        725,
        '{"action":"C","xid":725,"timestamp":"2026-11-22 01:31:09.621437+00",'
        '"lsn":"0/15261D8","nextlsn":"0/1526208"}',
    ),
    (
        "0/1526208",
        726,
        '{"action":"B","xid":726,"timestamp":"2026-11-22 01:31:09.621899+00",'
        '"lsn":"0/1526270","nextlsn":"0/15262A0"}',
    ),
    (
        "0/1526208",
        726,
        '{"action":"U","xid":726,"timestamp":"2026-11-22 01:31:09.621899+00",'
        '"lsn":"0/1526208","schema":"public","table":"t","columns":[{"name":"id","type":"integer",'
        '"value":1},{"name":"amount","type":"numeric(30,10)","value":0.0000000001},'
        '{"name":"ts","type":"timestamp with time zone","value":null},{"name":"note","type":"text",'
        '"value":"x"}],"identity":[{"name":"id","type":"integer","value":1}],'
        '"pk":[{"name":"id","type":"integer"}]}',
    ),
    (
        "0/1526208",
        726,
        '{"action":"I","xid":726,"schema":"public","table":"other","columns":'
        '[{"name":"id","type":"integer","value":9}],"pk":[{"name":"id","type":"integer"}]}',
    ),
    (
        "0/15262A0",
        726,
        '{"action":"C","xid":726,"timestamp":"2026-11-22 01:31:09.621899+00",'
        '"lsn":"0/1526270","nextlsn":"0/15262A0"}',
    ),
    (
        "0/15262A0",
        727,
        '{"action":"B","xid":727,"timestamp":"2026-11-22 01:31:09.621991+00",'
        '"lsn":"0/15262E0","nextlsn":"0/1526310"}',
    ),
    (
        "0/15262A0",
        727,
        '{"action":"D","xid":727,"timestamp":"2026-11-22 01:31:09.621991+00",'
        '"lsn":"0/15262A0","schema":"public","table":"t","identity":[{"name":"id","type":"integer",'
        '"value":2}],"pk":[{"name":"id","type":"integer"}]}',
    ),
    (
        "0/1526310",
        727,
        '{"action":"C","xid":727,"timestamp":"2026-11-22 01:31:09.621991+00",'
        '"lsn":"0/15262E0","nextlsn":"0/1526310"}',
    ),
]


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_lsn_round_trips(value: int) -> None:
    assert parse_lsn(format_lsn(value)) == value


def test_lsn_spelling_and_errors() -> None:
    assert format_lsn(parse_lsn("16/B374D848")) == "16/B374D848"
    assert parse_lsn("0/1526208") < parse_lsn("0/15262A0")
    with pytest.raises(ValueError, match="not a PostgreSQL LSN"):
        parse_lsn("1526208")


def test_rows_group_into_committed_transactions() -> None:
    txns = list(decode_transactions(ROWS, frozenset({"public.t"})))
    assert [t.xid for t in txns] == [725, 726, 727]
    assert [t.end_lsn for t in txns] == [
        parse_lsn(x) for x in ("0/1526208", "0/15262A0", "0/1526310")
    ]
    insert, update, delete = (decode_change(t.changes[0]) for t in txns)
    # Which tables are captured is wal2json's add-tables filter; the driver only counts.
    assert [len(t.changes) for t in txns] == [1, 2, 1]
    assert decode_change(txns[1].changes[1]).table == "public.other"
    assert (insert.op, insert.key, insert.before) == ("c", {"id": 1}, None)
    assert insert.after == {
        "id": 1,
        "amount": "12345678901234567890.1234567891",
        "ts": "2025-12-31 22:00:00.123456+00",
        "note": 'a"b\\c\nd \u00e9',
    }
    assert update.after is not None
    assert (update.op, update.before, update.after["amount"]) == ("u", {"id": 1}, "0.0000000001")
    assert (delete.op, delete.key, delete.before, delete.after) == ("d", {"id": 2}, {"id": 2}, None)
    assert txns[0].commit_ts_us == timestamp_micros("2026-11-22 01:31:09.621437+00")


def test_transactions_committed_before_the_start_are_counted_not_kept() -> None:
    """The slot lags the offset by a batch: what a peek re-reads before its start is dropped."""
    txns = list(
        decode_transactions(ROWS, frozenset({"public.t"}), start_lsn=parse_lsn("0/1526208"))
    )
    assert [(t.xid, t.size, len(t.changes)) for t in txns] == [
        (725, 1, 0),
        (726, 2, 2),
        (727, 1, 1),
    ]


def test_a_transaction_cut_off_by_the_peek_is_not_yielded() -> None:
    assert [t.xid for t in decode_transactions(ROWS[:5])] == [725]


def test_a_message_outside_transactions_is_a_position_to_confirm() -> None:
    """A heartbeat decoded between transactions: an empty transaction at its LSN."""
    message = (
        "0/1526250",
        None,
        '{"action":"M","transactional":false,"prefix":"spark-ckpt-heartbeat","content":"s"}',
    )
    txns = list(decode_transactions([*ROWS[:3], message, *ROWS[3:]]))
    assert [t.xid for t in txns] == [725, 0, 726, 727]
    assert (txns[1].end_lsn, txns[1].changes) == (parse_lsn("0/1526250"), [])
    # Inside a transaction a (transactional) message is no position of its own.
    inside = list(decode_transactions([*ROWS[:2], message, *ROWS[2:3]]))
    assert [t.xid for t in inside] == [725]


def test_snapshot_progress_in_words_and_json() -> None:
    running = SnapshotProgress(3, 1, 1_204_000, 3_000_000, "public.items")
    assert running.summary == (
        "table 2 of 3 (public.items), 1,204,000 of about 3,000,000 rows (40%)"
    )
    done = SnapshotProgress(2, 2, 7, None, None)
    assert done.summary == "2 table(s) done, 7 rows"
    assert done.to_json() == {
        "tables": 2,
        "tablesDone": 2,
        "rowsRead": 7,
        "rowsEstimated": None,
        "currentTable": None,
        "chunksDone": None,
        "chunksPending": None,
        "summary": "2 table(s) done, 7 rows",
    }
    chunked = SnapshotProgress(1, 0, 4_000, None, "public.k", 4, 2)
    assert chunked.summary == "table 1 of 1 (public.k), 4,000 rows; 4 chunk(s) done, 2 in flight"


def test_truncate_of_a_captured_table_is_carried_as_a_change() -> None:
    truncate = '{"action":"T","xid":725,"schema":"public","table":"t"}'
    rows = [ROWS[0], ("0/1", 725, truncate), ROWS[2]]
    (other,) = decode_transactions(rows, frozenset({"public.other"}))
    assert other.changes == []
    (txn,) = decode_transactions(rows, frozenset({"public.t"}))
    assert txn.changes == [truncate]
    change = decode_change(truncate)
    assert (change.op, change.table, change.key, change.before, change.after) == (
        "t",
        "public.t",
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("type_name", "text", "value"),
    [
        ("integer", "42", 42),
        ("bigint", "9223372036854775807", 9223372036854775807),
        ("numeric(30,10)", "0.0000000001", "0.0000000001"),
        (
            "numeric",
            "12345678901234567890.123456789012345678",
            "12345678901234567890.123456789012345678",
        ),
        ("numeric", "NaN", "NaN"),
        ("double precision", "0.1", 0.1),
        ("double precision", "-Infinity", "-Infinity"),
        ("boolean", "true", True),
        ("boolean", "f", False),
        (
            "timestamp with time zone",
            "2026-02-03 04:05:06.789012+00",
            "2026-02-03 04:05:06.789012+00",
        ),
        ("integer[]", "{1,2}", "{1,2}"),
        ("text", None, None),
    ],
)
def test_snapshot_text_renders_like_wal2json(
    type_name: str, text: str | None, value: object
) -> None:
    assert parse_text_value(type_name, text) == value
    if text is not None and type_name.startswith(("numeric", "double", "integer", "bigint")):
        # What wal2json prints for the same value decodes to the same thing.
        printed = json.loads(
            text if text.lstrip("-")[0].isdigit() else f'"{text}"', parse_float=NumberText
        )
        assert normalize_value(type_name, printed) == value


def test_offsets_round_trip_with_a_stable_key_order() -> None:
    offset = PgOffset(3, 17, "stream", parse_lsn("0/1526208"))
    assert list(offset.to_json()) == ["v", "checkpoint", "emitted", "phase", "lsn"]
    assert PgOffset.from_json(json.loads(json.dumps(offset.to_json()))) == offset
    assert PgOffset.from_json(PgOffset(-1, 0, "snapshot", None).to_json()).lsn is None
    with pytest.raises(LogRewrittenError, match="written by another source"):
        PgOffset.from_json({"v": 1, "checkpoint": 0, "emitted": 0, "scan": ["", 0, 0]})


def postgres_options(**extra: str) -> dict[str, str]:
    return {
        "connector": "postgres",
        "dsn": "postgresql://u:secret@h/db",
        "slot": "orders_cdc",
        "tables": "public.orders, public.items",
        **extra,
    }


def test_postgres_options_parse_and_never_show_the_dsn() -> None:
    parsed = SourceOptions.parse(postgres_options())
    own = parsed.connector_options
    assert isinstance(own, PostgresOptions)
    assert own.tables == ("public.orders", "public.items")
    assert own.snapshot == "initial"
    assert "secret" not in repr(parsed)
    never = SourceOptions.parse(postgres_options(snapshot="never")).connector_options
    assert isinstance(never, PostgresOptions)
    assert never.snapshot == "never"
    assert own.heartbeat_interval == 60.0
    beating = SourceOptions.parse(postgres_options(heartbeatInterval="5s")).connector_options
    assert isinstance(beating, PostgresOptions)
    assert beating.heartbeat_interval == 5.0
    off = SourceOptions.parse(postgres_options(heartbeatInterval="unlimited")).connector_options
    assert isinstance(off, PostgresOptions)
    assert off.heartbeat_interval == float("inf")


@pytest.mark.parametrize(
    ("extra", "error", "match"),
    [
        ({"slot": "Bad-Name"}, InvalidOptionError, "replication slot name"),
        ({"snapshot": "sometimes"}, InvalidOptionError, "one of: initial, never"),
        ({"gate": "off"}, InvalidOptionError, "whole transactions only"),
        ({"tables": "a.b,a.b"}, InvalidOptionError, "distinct"),
        ({"path": "/x"}, InvalidOptionError, "reads the option 'dsn'"),
        ({"tables": " "}, ConfigError, "needs the option 'tables'"),
        ({"heartbeatInterval": "0s"}, InvalidOptionError, "heartbeatInterval"),
        ({"heartbeatInterval": "soon"}, InvalidOptionError, "heartbeatInterval"),
    ],
)
def test_bad_postgres_options_say_what_and_how(
    extra: dict[str, str], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        SourceOptions.parse(postgres_options(**extra))


def test_passwords_are_redacted_and_scrubbed() -> None:
    uri = "postgresql://spark:s3cr%40t@127.0.0.1:5432/db"
    assert "s3cr" not in redact_dsn(uri)
    assert "***" in redact_dsn(uri)
    keywords = "host=h dbname=d user=u password=hunter2"
    assert "hunter2" not in redact_dsn(keywords)
    assert scrub("failed for hunter2 at h", keywords) == "failed for *** at h"
    with pytest.raises(InvalidOptionError) as info:
        redact_dsn("host=h password='unterminated")
    assert "unterminated" not in str(info.value)


def _insert(i: int) -> str:
    return (
        f'{{"action":"I","xid":9,"schema":"public","table":"t","columns":'
        f'[{{"name":"id","type":"integer","value":{i}}}],"pk":[{{"name":"id","type":"integer"}}]}}'
    )


def test_a_large_transaction_is_split_across_partitions_and_spilled_chunks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Bounded memory on both sides: chunks of 3 changes, 2 kept in memory, partitions of 4.

    The 7-change transaction becomes two parts in two partitions (the others keep to
    transaction boundaries); each row keeps its transaction's fields and its event index counts
    through the whole transaction.
    """
    from spark_ckpt.sources import change_store
    from spark_ckpt.sources.postgres import connector as postgres
    from spark_ckpt.sources.postgres import stream_partitions
    from spark_ckpt.sources.postgres.decoding.transactions import PgTransaction
    from spark_ckpt.state.storage import Location

    monkeypatch.setattr(change_store, "CHUNK_CHANGES", 3)
    from spark_ckpt.sources.postgres.stored_changes import store_schema

    store = change_store.ChangeStore(store_schema(False), Location(str(tmp_path / "stream")), 1)
    txns = []
    for xid, size, ts in ((700, 7, 1_000_000), (701, 1, None), (702, 2, 2_000_000)):
        txn = PgTransaction(xid, 0, xid, ts, store=store)
        for _ in range(size):
            txn.add(_insert(store.size))
        txns.append(txn)
    store.seal()
    assert [c.count for c in store.chunks] == [3, 3, 3, 1]
    assert all(c.data is None for c in store.chunks)  # over the 1-byte limit: all spilled
    assert len(list((tmp_path / "stream").iterdir())) == 4
    options = PostgresOptions(
        dsn="postgresql://u@h/d", slot="s", tables=("public.t",), snapshot="never"
    )
    connector = postgres.PostgresConnector(options, changes_per_partition=4)
    partitions = connector._stream_partitions(txns, emitted=10)
    assert [[p[:2] + p[4:] for p in part.pieces] for part in partitions] == [  # type: ignore[attr-defined]
        [(700, 10, 0, 4)],
        [(700, 10, 4, 3)],
        [(701, 11, 0, 1), (702, 12, 0, 2)],
    ]
    rows = [
        r for part in partitions for b in stream_partitions.stream_rows(part) for r in b.to_pylist()
    ]  # type: ignore[arg-type]
    assert [(r["txn_id"], r["txn_order"], r["txn_size"], r["event_index"]) for r in rows] == [
        *(("700", 10, 7, i) for i in range(7)),
        ("701", 11, 1, 0),
        ("702", 12, 2, 0),
        ("702", 12, 2, 1),
    ]
    assert [r["key"] for r in rows] == [f'{{"id":{i}}}' for i in range(10)]
    assert rows[7]["commit_ts"] is None
    assert rows[9]["commit_ts"].timestamp() == 2.0
    broken = stream_partitions.PgStreamPartition(
        "postgres:s", "wal2json", ((1, 1, None, 9, 0, 9),), partitions[0].spans
    )  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="holds 4 changes, its transactions 9"):
        list(stream_partitions.stream_rows(broken))
    store.discard()
    assert list((tmp_path / "stream").iterdir()) == []
