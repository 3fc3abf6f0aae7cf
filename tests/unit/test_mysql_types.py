"""Column types decoded from real binlog events: a MariaDB server's packets, replayed.

The fixture (``bench/capture_mysql_types_fixture.py``) holds the replication stream a MariaDB
server sent for ``every_type``, a table with a column of each type the connector decodes: the
extremes of each type, a row of nulls, text in three character sets, an update and a delete. The
packets go through the native decoder and the client's table map description
(:class:`spark_ckpt.sources.mysql.binlog.StreamEvents`), exactly as a live read; the fixture's
rows as a query returned them must give the same JSON values (a snapshot's and the binlog's
agree).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import struct
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from spark_ckpt.errors import ChangeDecodeError, DataLossError
from spark_ckpt.sources.mysql.binlog import StreamEvents
from spark_ckpt.sources.mysql.binlog_offset import GtidStart
from spark_ckpt.sources.mysql.rows import MySqlPartition, partitions, rows
from spark_ckpt.sources.mysql.schemas import SchemaState, SchemaTracker
from spark_ckpt.sources.mysql.table_map_columns import TableMapColumns
from spark_ckpt.sources.mysql.transactions import (
    BinlogTransaction,
    Statement,
    TransactionAssembler,
)
from spark_ckpt.sources.mysql.types import FieldType, MySqlColumn, spark_type
from spark_ckpt.sources.mysql.values import decoded_text, json_value, row_values

FIXTURE = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "mysql" / "types-mariadb-10.11.19.json").read_text()
)
TABLE = "types.every_type"
_TABLE_MAP = 19


class _Control:
    """What the client asks of its control connection while decoding (nothing: full metadata)."""

    charset = "utf8mb4"

    @staticmethod
    def _get_dbms() -> str:
        return "mariadb"


class _CountingColumns(TableMapColumns):
    """The client's description of table maps, counting the maps it was asked to describe."""

    def __init__(self) -> None:
        super().__init__(_Control())
        self.described = 0

    def columns(self, payload: bytes, checksum: bool) -> tuple[MySqlColumn, ...]:
        self.described += 1
        return super().columns(payload, checksum)


def _packets(edit: Callable[[int, bytes], bytes] | None = None) -> list[bytes]:
    """The fixture's packets (a payload each: the status byte, then the event)."""
    raw = [bytes.fromhex(packet) for packet in FIXTURE["packets"]]
    return [edit(n, packet) for n, packet in enumerate(raw)] if edit else raw


def _kind(payload: bytes) -> int | None:
    """An event packet's event type (after the status byte and the 4-byte timestamp)."""
    return payload[5] if len(payload) > 5 and payload[0] == 0 else None


def _framed(payloads: list[bytes]) -> bytes:
    """The payloads as the connection carries them: length, sequence byte, payload."""
    return b"".join(
        len(p).to_bytes(3, "little") + bytes([n % 256]) + p for n, p in enumerate(payloads)
    )


def _replayed(
    events: StreamEvents, chunks: list[bytes] | None = None
) -> Iterator[BinlogTransaction | Statement]:
    """What a live read yields for the fixture's packets (whole, or as stream ``chunks``)."""
    if chunks is None:
        for packet in _packets():
            events.decoder.push_payload(packet)
    else:
        for chunk in chunks:
            events.decoder.push(chunk)
    while items := events.decoder.next_items():
        for item in items:
            found = events.handle(item)
            if found is not None:
                yield found


def _events(describer: TableMapColumns | None = None) -> StreamEvents:
    return StreamEvents(
        frozenset({TABLE}),
        TransactionAssembler({TABLE: ("id",)}),
        SchemaTracker(SchemaState()),
        describer or TableMapColumns(_Control()),
        FIXTURE["use_checksum"],
    )


def _transactions(chunks: list[bytes] | None = None) -> list[BinlogTransaction]:
    found = _replayed(_events(), chunks)
    return [txn for txn in found if isinstance(txn, BinlogTransaction)]


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _row(**values: Any) -> dict[str, Any]:
    """A row of ``every_type``: the given values, every other column null."""
    return {name: values.get(name) for name in COLUMNS}


COLUMNS = {
    "id": "int",
    "t": "tinyint",
    "tu": "smallint",
    "s": "smallint",
    "su": "int",
    "m": "int",
    "mu": "int",
    "i": "int",
    "iu": "bigint",
    "b": "bigint",
    "bu": "decimal(20,0)",
    "d": "decimal(12,4)",
    "dw": "string",  # DECIMAL(50,10): wider than Spark's 38 digits
    "f": "float",
    "dbl": "double",
    "dt": "date",
    "dtm": "timestamp_ntz",
    "dtm6": "timestamp_ntz",
    "ts": "timestamp",
    "ts3": "timestamp",
    "tm": "string",
    "tm6": "string",
    "y": "smallint",
    "c": "string",
    "vc": "string",
    "tx": "string",
    "l1": "string",
    "bin": "binary",
    "vb": "binary",
    "bl": "binary",
    "js": "string",
    "e": "string",
    "st": "string",
    "bt1": "boolean",
    "bt": "bigint",
    "bt64": "decimal(20,0)",
}
"""``every_type``'s columns and the Spark types a typed mirror gives them."""

LOW = _row(
    id=1, t=-128, tu=0, s=-32768, su=0, m=-8388608, mu=0, i=-(2**31), iu=0, b=-(2**63), bu=0,
    d="-99999999.9999", dw="-1234567890123456789012345678901234567890.0123456789",
    f=-3.4e38, dbl=-1.7976931348623157e308, dt="1000-01-01", dtm="1000-01-01 00:00:00",
    dtm6="1000-01-01 00:00:00.000001", ts="1970-01-01 00:00:01+00:00",
    ts3="1970-01-01 00:00:01.001+00:00", tm="-838:59:59", tm6="-00:00:00.000001", y=1901,
    c="", vc="", tx="", l1="", bin="AAAAAA==", vb="", bl="", js="[]", e="small", st="",
    bt1=False, bt=0, bt64=0,
)  # fmt: skip
HIGH = _row(
    id=2, t=127, tu=255, s=32767, su=65535, m=8388607, mu=16777215, i=2**31 - 1,
    iu=2**32 - 1, b=2**63 - 1, bu=2**64 - 1, d="99999999.9999",
    dw="1234567890123456789012345678901234567890.0123456789", f=3.4e38,
    dbl=1.7976931348623157e308, dt="9999-12-31", dtm="9999-12-31 23:59:59",
    dtm6="9999-12-31 23:59:59.999999", ts="2038-01-19 03:14:07+00:00",
    ts3="2038-01-19 03:14:07.999+00:00", tm="838:59:59", tm6="838:59:59.000000", y=2155,
    c="abcd", vc="x" * 300, tx="y" * 1000, l1="zzz", bin="/////w==", vb="AP8A", bl="3q2+7w==",
    js='{"k": [1, 2.5, "three", null, true]}', e="large", st="a,b,c,d", bt1=True, bt=1023,
    bt64=2**64 - 1,
)  # fmt: skip
ORDINARY = _row(
    id=4, t=7, tu=200, s=-300, su=40000, m=12345, mu=54321, i=42, iu=3_000_000_000, b=-42,
    bu=2**63, d="1.5000", dw="0.0000000001", f=1.1, dbl=0.1, dt="2024-02-29",
    dtm="2024-02-29 13:05:00", dtm6="2024-02-29 13:05:00.250000",
    ts="2024-02-29 12:05:00+00:00", ts3="2024-02-29 12:05:00.125+00:00", tm="13:05:00",
    tm6="-25:00:00.500000", y=2024, c="né", vc="Grüße, 世界 🎉", tx="línea\nnueva", l1="café",
    bin="AQIAAA==", vb="yv4=", bl="AA==", js='{"a": {"b": "ü"}}', e="medium", st="b,d",
    bt1=True, bt=5, bt64=2**63,
)  # fmt: skip
UPDATED = ORDINARY | {"vc": "changed", "st": "c", "d": "-0.0001", "bu": 1}


def test_every_type_decodes_from_the_binlog_to_the_value_mysql_prints() -> None:
    changes = [change for txn in _transactions() for change in txn.rows()]
    assert [(c["op"], _loads(c["before"]), _loads(c["after"])) for c in changes] == [
        ("c", None, LOW),
        ("c", None, HIGH),
        ("c", None, _row(id=3)),
        ("c", None, ORDINARY),
        ("u", ORDINARY, UPDATED),
        ("d", HIGH, None),
    ]
    assert {json.dumps(json.loads(c["column_types"] or "")) for c in changes} == {
        json.dumps(COLUMNS)
    }
    assert [_loads(c["key"]) for c in changes] == [{"id": n} for n in (1, 2, 3, 4, 4, 2)]
    assert {txn.end.file for txn in _transactions()} == {"mariadb-bin.000001"}


def test_the_stream_decodes_the_same_whatever_its_reads_split() -> None:
    """The connection's bytes arrive in any pieces: packets are framed across them."""
    stream = _framed(_packets())
    whole = [list(txn.rows()) for txn in _transactions()]
    for size in (1, 7, 4096):
        chunks = [stream[n : n + size] for n in range(0, len(stream), size)]
        assert [list(txn.rows()) for txn in _transactions(chunks)] == whole, size


def test_a_read_with_a_stop_position_ends_after_the_event_that_reaches_it() -> None:
    """A restart reads its logged batch again up to the batch's end: not an event more."""
    ends = [txn.end for txn in _transactions()]
    for stop in ends:
        events = _events()
        events.decoder.set_stop(stop.file, stop.pos)
        found = [t for t in _replayed(events) if isinstance(t, BinlogTransaction)]
        assert [t.end for t in found] == [end for end in ends if end.pos <= stop.pos]
        assert events.decoder.ended


def test_a_table_map_read_again_is_described_once() -> None:
    """The server wrote a table map before each rows event: one description serves them all."""
    counting = _CountingColumns()
    kinds = [_kind(packet) for packet in _packets()]
    assert kinds.count(_TABLE_MAP) == 6, "one table map before each of the six rows events"
    assert len([t for t in _replayed(_events(counting)) if isinstance(t, BinlogTransaction)]) == 6
    assert counting.described == 1


def test_a_table_map_with_other_bytes_is_described_anew() -> None:
    """A map that differs in any byte (here the table id; after DDL its columns) is its own.

    The rows after it are read with it.
    """
    kinds = [_kind(packet) for packet in _packets()]
    second = [n for n, kind in enumerate(kinds) if kind == _TABLE_MAP][1]

    def renumbered(index: int, raw: bytes) -> bytes:
        # the table id (6 bytes after the 20 of status and header), in the map and its rows
        if index not in (second, second + 1):
            return raw
        return raw[:20] + bytes([raw[20] ^ 0x40]) + raw[21:]

    counting = _CountingColumns()
    events = _events(counting)
    for packet in _packets(renumbered):
        events.decoder.push_payload(packet)
    found = []
    while items := events.decoder.next_items():
        found += [f for f in map(events.handle, items) if isinstance(f, BinlogTransaction)]
    assert counting.described == 2, "the first map and the renumbered one, once each"
    assert [list(t.rows()) for t in found] == [list(t.rows()) for t in _transactions()]


def test_a_server_that_lacks_the_gtid_start_is_data_loss() -> None:
    """The server's error 1236 for a GTID start: the changes after it are not in its binlog."""
    events = _events()
    events.decoder.push(_framed([b"\xff\xd4\x04#HY000Could not find GTID state"]))
    (item,) = events.decoder.next_items()
    assert item == ("error", 1236, "Could not find GTID state")
    assert events.decoder.ended

    class _Options:
        host, port = "db", 3306

    with pytest.raises(DataLossError, match=r"0-1-9.*db:3306.*Could not find GTID state"):
        events.handle(item, _Options(), GtidStart("0-1-9"))


def test_a_queried_row_gives_the_same_values_as_the_binlog() -> None:
    """What a snapshot reads (PyMySQL, in UTC) and what the binlog holds agree, value by value."""
    describer = TableMapColumns(_Control())
    packets = _packets()
    describer.format_description(
        next(p for p in packets if _kind(p) == 15), FIXTURE["use_checksum"]
    )
    described = describer.columns(
        next(p for p in packets if _kind(p) == _TABLE_MAP), FIXTURE["use_checksum"]
    )
    columns = {column.name: column for column in described}
    queried = {row["id"]: {k: _untagged(v) for k, v in row.items()} for row in FIXTURE["queried"]}
    assert sorted(queried) == [1, 3, 4]
    for expected in (LOW, _row(id=3), UPDATED):
        assert row_values(queried[expected["id"]], columns) == expected


def _untagged(value: Any) -> Any:
    """A fixture's tagged query value as PyMySQL gave it (``bench/capture_mysql_types_fixture``)."""
    if not isinstance(value, dict):
        return value
    ((tag, text),) = value.items()
    if tag == "decimal":
        return Decimal(text)
    if tag == "datetime":
        return dt.datetime.fromisoformat(text)
    if tag == "date":
        return dt.date.fromisoformat(text)
    if tag == "timedelta_us":
        return dt.timedelta(microseconds=text)
    if tag == "bytes":
        return base64.b64decode(text)
    if tag == "set":
        return set(text)
    raise AssertionError(f"unknown tag {tag}")


def test_every_value_fits_its_mirror_column() -> None:
    """The typed mirror converts each JSON value into its Spark type's Arrow type exactly."""
    from spark_ckpt.sinks.mirror.types import arrow_type, to_arrow

    for name, kind in COLUMNS.items():
        values = [row[name] for row in (LOW, HIGH, _row(id=3), ORDINARY)]
        array = to_arrow(values, arrow_type(kind), TABLE, name)
        assert array.null_count == 1 or name == "id", name
    floats = to_arrow([1.1], pa.float32(), TABLE, "f")
    assert struct.pack("<f", floats[0].as_py()) == struct.pack("<f", 1.1)
    stamps = to_arrow([HIGH["ts3"]], arrow_type("timestamp"), TABLE, "ts3").to_pylist()
    assert stamps == [dt.datetime(2038, 1, 19, 3, 14, 7, 999000, tzinfo=dt.timezone.utc)]
    wide = to_arrow([HIGH["bu"]], arrow_type("decimal(20,0)"), TABLE, "bu").to_pylist()
    assert wide == [Decimal(2**64 - 1)]


def test_a_mysql_json_document_is_its_compact_text() -> None:
    """MySQL's binary JSON arrives decoded (keys as bytes); MariaDB's JSON is text (above)."""
    column = MySqlColumn("doc", FieldType.JSON)
    document = {b"k": [1, 2.5, b"v", None, True], b"n": {b"x": "ü"}}
    assert json_value(document, column) == '{"k":[1,2.5,"v",null,true],"n":{"x":"ü"}}'
    assert json_value("text", column) == '"text"'  # a JSON string scalar stays one
    assert spark_type(column) == "string"


def test_text_in_a_character_set_python_cannot_decode_is_a_typed_error() -> None:
    column = MySqlColumn("legacy", FieldType.VARCHAR, charset="swe7")
    with pytest.raises(ChangeDecodeError, match=r"legacy.*swe7.*utf8mb4"):
        json_value(b"abc", column)
    with pytest.raises(ChangeDecodeError, match=r"legacy.*swe7.*utf8mb4"):
        decoded_text(b"abc", column, "swe7")


def test_text_the_native_decoder_leaves_to_python_decodes_by_its_codec() -> None:
    """A character set other than UTF-8 goes to Python's codec (``latin1`` is cp1252 there)."""
    column = MySqlColumn("l1", FieldType.VARCHAR, charset="latin1")
    assert decoded_text(b"caf\xe9 \x80", column, "cp1252") == "café €"
    broken = MySqlColumn("u", FieldType.VARCHAR, charset="utf8mb4")
    with pytest.raises(ChangeDecodeError, match=r"'u'.*not utf8mb4 text"):
        decoded_text(b"\xff", broken, "utf8")


def test_rows_carry_their_column_types_only_when_asked() -> None:
    txn = _transactions()[0]
    (partition,) = partitions("mysql:h:3306", [txn], 0, 100)
    assert isinstance(partition, MySqlPartition)
    (typed,) = list(rows(partition, column_types=True))
    (plain,) = list(rows(partition, column_types=False))
    assert json.loads(typed.column("column_types")[0].as_py()) == COLUMNS
    assert "column_types" not in plain.schema.names
    assert typed.num_rows == plain.num_rows == 1
