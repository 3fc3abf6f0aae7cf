"""Column types decoded from real binlog events: a MariaDB server's packets, replayed.

The fixture (``bench/capture_mysql_types_fixture.py``) holds the replication stream a MariaDB
server sent for ``every_type``, a table with a column of each type the connector decodes: the
extremes of each type, a row of nulls, text in three character sets, an update and a delete. The
packets go through ``mysql-replication``'s own event decoding and then the connector's
(:func:`spark_ckpt.sources.mysql.binlog.feed_events`), exactly as a live read; the fixture's rows
as a query returned them must give the same JSON values (a snapshot's and the binlog's agree).
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
import pymysql.protocol
import pytest
from pymysqlreplication.constants.BINLOG import FORMAT_DESCRIPTION_EVENT, TABLE_MAP_EVENT
from pymysqlreplication.event import FormatDescriptionEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import TableMapEvent

from spark_ckpt.errors import ChangeDecodeError
from spark_ckpt.sources.mysql import table_map_reuse, time2
from spark_ckpt.sources.mysql.binlog import TableMaps, feed, wanted_events
from spark_ckpt.sources.mysql.binlog_offset import BinlogPosition
from spark_ckpt.sources.mysql.rows import MySqlPartition, partitions, rows
from spark_ckpt.sources.mysql.schemas import SchemaState, SchemaTracker
from spark_ckpt.sources.mysql.transactions import BinlogTransaction, TransactionAssembler
from spark_ckpt.sources.mysql.types import FieldType, MySqlColumn, spark_type
from spark_ckpt.sources.mysql.values import json_value, row_values

FIXTURE = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "mysql" / "types-mariadb-10.11.19.json").read_text()
)
TABLE = "types.every_type"
_FED = frozenset(wanted_events())
_EVENTS = _FED | {FormatDescriptionEvent, TableMapEvent}


class _Control:
    """What the client asks of its control connection while decoding (nothing: full metadata)."""

    charset = "utf8mb4"

    @staticmethod
    def _get_dbms() -> str:
        return "mariadb"


def _replayed_events(
    kinds: frozenset[type] = _FED, edit: Callable[[int, bytes], bytes] | None = None
) -> Iterator[Any]:
    """The fixture's packets decoded by the client as its stream reader does.

    This is the reader's loop minus the socket: the format description first, table maps kept
    by table id, one control connection, only the events of ``kinds`` yielded (the connector's
    by default). ``edit`` may change a packet (its index, its bytes) before it is decoded.
    """
    control = _Control()
    table_map: dict[int, Any] = {}
    version: tuple[int, ...] = tuple(FIXTURE["mysql_version"])
    post_header: Any = None
    for index, data in enumerate(FIXTURE["packets"]):
        raw = bytes.fromhex(data)
        packet = pymysql.protocol.MysqlPacket(edit(index, raw) if edit else raw, "utf8")
        if not packet.is_ok_packet():
            continue
        wrapper = BinLogPacketWrapper(
            packet,
            table_map,
            control,
            version,
            FIXTURE["use_checksum"],
            _EVENTS,
            None,
            None,
            None,
            None,
            False,
            False,
            False,
            True,
            False,
            False,
            post_header,
        )
        event = wrapper.event
        if wrapper.event_type == FORMAT_DESCRIPTION_EVENT and event is not None:
            version, post_header = event.mysql_version, event.post_header_len
        if wrapper.event_type == TABLE_MAP_EVENT and event is not None:
            table_map[event.table_id] = event.get_table()
        if type(event) in kinds:
            yield event


def _transactions() -> list[BinlogTransaction]:
    assembler = TransactionAssembler({TABLE: ("id",)})
    maps, tracker = TableMaps(), SchemaTracker(SchemaState())
    captured = frozenset({TABLE})
    found = [
        feed(assembler, event, BinlogPosition("mariadb-bin.000001", n), captured, maps, tracker)
        for n, event in enumerate(_replayed_events())
    ]
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
    time2.install()
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


def test_the_clients_own_time_decoding_is_what_install_corrects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the corrected decoder a negative TIME with a fraction comes out wrong.

    If the client ever fixes it, this says so (and the correction can go).
    """
    from pymysqlreplication.row_event import RowsEvent

    monkeypatch.setattr(RowsEvent, time2.CLIENT_READER, time2.client_reader())
    changes = [change for txn in _transactions() for change in txn.rows()]
    assert _loads(changes[0]["after"])["tm6"] == "-00:00:00.999999"


def test_a_table_map_read_again_reuses_its_decoding_and_decodes_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server wrote a table map before each rows event: one decoding serves them all."""
    time2.install()
    table_map_reuse.install()
    maps = list(_replayed_events(frozenset({TableMapEvent})))
    assert len(maps) == 6, "one table map before each of the fixture's six rows events"
    assert all(m.table_obj is maps[0].table_obj for m in maps), "decoded once"
    assert len({id(m.packet) for m in maps}) == 6, "each event keeps its own packet and header"
    reused = _transactions()

    monkeypatch.setattr(TableMapEvent, "__init__", table_map_reuse.client_init())
    own = list(_replayed_events(frozenset({TableMapEvent})))
    assert own[1].table_obj is not own[0].table_obj
    assert own[1].table_obj == own[0].table_obj == maps[0].table_obj
    assert [list(t.rows()) for t in _transactions()] == [list(t.rows()) for t in reused]


def test_a_table_map_with_other_bytes_is_decoded_anew() -> None:
    """A map that differs in any byte (here the table id; after DDL its columns) is its own."""
    table_map_reuse.install()
    kinds = [int(packet[10:12] or "0", 16) for packet in FIXTURE["packets"]]
    first = kinds.index(TABLE_MAP_EVENT)

    def renumbered(index: int, raw: bytes) -> bytes:
        return raw[:20] + bytes([raw[20] ^ 0x40]) + raw[21:] if index == first + 4 else raw

    maps = list(_replayed_events(frozenset({TableMapEvent}), renumbered))
    ids = [m.table_id for m in maps]
    assert ids[0] != ids[1], ids
    assert ids[2] == ids[0], ids
    assert maps[1].table_obj is not maps[0].table_obj
    assert maps[2].table_obj is maps[0].table_obj


def test_a_queried_row_gives_the_same_values_as_the_binlog() -> None:
    """What a snapshot reads (PyMySQL, in UTC) and what the binlog holds agree, value by value."""
    maps = TableMaps()
    time2.install()
    first = next(e for e in _replayed_events() if hasattr(e, "rows"))
    columns, _ = maps.columns(first)
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


@pytest.mark.parametrize(
    ("raw", "fsp", "expected"),
    [
        ("800000", 0, dt.timedelta(0)),
        ("7fffff", 0, -dt.timedelta(seconds=1)),
        ("b46efb", 0, dt.timedelta(hours=838, minutes=59, seconds=59)),
        ("4b9105", 0, -dt.timedelta(hours=838, minutes=59, seconds=59)),
        ("7fffffffffff", 6, -dt.timedelta(microseconds=1)),
        ("7fffffce", 1, -dt.timedelta(milliseconds=500)),
        ("7fffff ff9c".replace(" ", ""), 4, -dt.timedelta(milliseconds=10)),
        ("800001 32".replace(" ", ""), 2, dt.timedelta(seconds=1, milliseconds=500)),
    ],
)
def test_time2_decodes_signs_and_fractions_as_mysql_packs_them(
    raw: str, fsp: int, expected: dt.timedelta
) -> None:
    assert time2.time2_value(bytes.fromhex(raw), fsp) == expected


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


def test_rows_carry_their_column_types_only_when_asked() -> None:
    txn = _transactions()[0]
    (partition,) = partitions("mysql:h:3306", [txn], 0, 100)
    assert isinstance(partition, MySqlPartition)
    (typed,) = list(rows(partition, column_types=True))
    (plain,) = list(rows(partition, column_types=False))
    assert json.loads(typed.column("column_types")[0].as_py()) == COLUMNS
    assert "column_types" not in plain.schema.names
    assert typed.num_rows == plain.num_rows == 1
