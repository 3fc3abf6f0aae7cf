"""A snapshot's rows rendered natively give the texts the Python rules give the same values.

The native renderer (:class:`spark_ckpt.sources.mysql._native.QueriedRows`) reads rows as the
server sends them in the text protocol; :func:`~spark_ckpt.sources.mysql.values.queried_values`
is the rules' Python statement, on the values PyMySQL's converters make of the same text (what
the snapshot read before the renderer). Both must give the same ``key`` and ``after`` texts for
any value MySQL prints, which the generated rows here check column type by column type; the
live comparison against the binlog's rows of the same table is the typed-mirror integration
test (``test_typed_mirrors_equal_the_tables_value_for_value_while_the_query_streams``).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from decimal import Decimal
from typing import Any

import pymysql
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysql import converters

from spark_ckpt.errors import SourceConnectionError
from spark_ckpt.sources.mysql._native import QueriedRows
from spark_ckpt.sources.mysql.queried_rows import queried_rows
from spark_ckpt.sources.mysql.table_map_columns import described
from spark_ckpt.sources.mysql.types import BINARY_CHARSET, FieldType, MySqlColumn
from spark_ckpt.sources.mysql.values import queried_values
from spark_ckpt.sources.schema import json_text

COLUMNS = (
    MySqlColumn("id", FieldType.LONG, primary=True),
    MySqlColumn("b", FieldType.LONGLONG, unsigned=True),
    MySqlColumn("m", FieldType.INT24),
    MySqlColumn("y", FieldType.YEAR, unsigned=True),
    MySqlColumn("f", FieldType.FLOAT),
    MySqlColumn("dbl", FieldType.DOUBLE),
    MySqlColumn("d", FieldType.NEWDECIMAL, precision=20, scale=4),
    MySqlColumn("dt", FieldType.DATE),
    MySqlColumn("dtm", FieldType.DATETIME2, fsp=3),
    MySqlColumn("ts", FieldType.TIMESTAMP2, fsp=6),
    MySqlColumn("tm", FieldType.TIME2, fsp=2),
    MySqlColumn("vc", FieldType.VARCHAR, charset="utf8mb4"),
    MySqlColumn("bin", FieldType.STRING, charset=BINARY_CHARSET, length=4),
    MySqlColumn("bl", FieldType.BLOB, charset=BINARY_CHARSET),
    MySqlColumn("e", FieldType.ENUM, charset="utf8mb4", members=("small", "it's")),
    MySqlColumn("st", FieldType.SET, charset="utf8mb4", members=("d", "a", "c")),
    MySqlColumn("bt1", FieldType.BIT, bits=1),
    MySqlColumn("bt", FieldType.BIT, bits=40),
    MySqlColumn("js", FieldType.JSON),
)
KEY = ("id", "d")


def _lenenc(value: bytes | None) -> bytes:
    if value is None:
        return b"\xfb"
    n = len(value)
    if n < 0xFB:
        head = bytes([n])
    elif n < 1 << 16:
        head = b"\xfc" + n.to_bytes(2, "little")
    elif n < 1 << 24:
        head = b"\xfd" + n.to_bytes(3, "little")
    else:
        head = b"\xfe" + n.to_bytes(8, "little")
    return head + value


def _packets(rows: list[list[bytes | None]]) -> bytes:
    """The rows as the server sends them, then its EOF packet."""
    payloads = [b"".join(_lenenc(v) for v in row) for row in rows] + [b"\xfe\x00\x00\x02\x00"]
    return b"".join(
        len(p).to_bytes(3, "little") + bytes([n % 256]) + p for n, p in enumerate(payloads)
    )


def _pymysql(column: MySqlColumn, raw: bytes | None) -> Any:
    """What PyMySQL's converters made of a text-protocol value of ``column``."""
    if raw is None:
        return None
    if column.is_binary or column.code == FieldType.BIT:
        return raw
    text = raw.decode()
    code = column.code
    if code in (FieldType.FLOAT, FieldType.DOUBLE):
        return float(text)
    if code == FieldType.NEWDECIMAL:
        return Decimal(text)
    if code == FieldType.DATE:
        return converters.convert_date(text)
    if code in (FieldType.DATETIME2, FieldType.TIMESTAMP2):
        return converters.convert_datetime(text)
    if code == FieldType.TIME2:
        return converters.convert_timedelta(text)
    if code in (FieldType.LONG, FieldType.LONGLONG, FieldType.INT24, FieldType.YEAR):
        return int(text)
    return text


def _both(
    rows: list[list[bytes | None]],
) -> tuple[list[tuple[str | None, str | None]], list[tuple[str | None, str | None]]]:
    native = QueriedRows([described(c, None) for c in COLUMNS], list(KEY))
    stream = _packets(rows)
    for start in range(0, len(stream), 5000):
        native.push(stream[start : start + 5000])
    assert native.ended
    keys, afters = native.take(len(rows) + 1)
    assert native.ready == 0
    by_name = {c.name: c for c in COLUMNS}
    expected = []
    for row in rows:
        values = queried_values(
            {c.name: _pymysql(c, raw) for c, raw in zip(COLUMNS, row, strict=True)}, by_name
        )
        expected.append((json_text({k: values[k] for k in KEY}), json_text(values)))
    return list(zip(keys.to_pylist(), afters.to_pylist(), strict=True)), expected


def _text(value: object) -> bytes:
    return str(value).encode()


_ROW_EDGES: list[list[bytes | None]] = [
    [
        b"1", b"18446744073709551615", b"-8388608", b"0000", b"-3.40282e38", b"1e16",
        b"-0.0001", b"0000-00-00", b"2024-02-29 13:05:00.250", b"0000-00-00 00:00:00.000000",
        b"-838:59:59.00", "Grüße \"q\" \\ \n\t\x01 🎉".encode(), b"\x01\x02", b"", b"it's",
        b"c,d", b"\x01", b"\x00\x00\x00\x03\xff", b'{"k": [1, 2.50, "v", null, true, 1e16]}',
    ],
    [b"2", None, None, None, None, None, None, None, None, None, None, None, None, None, None,
     b"", b"\x00", None, None],
    [b"3", b"0", b"8388607", b"2155", b"1.1", b"0.1", b"99999999999999.9999", b"9999-12-31",
     b"1000-01-01 00:00:00.000", b"2038-01-19 03:14:07.999999", b"-00:00:00.01",
     b"", b"\xff\xff\xff\xff", b"\x00" * 300, b"small", b"a", b"\x00",
     b"\xff\xff\xff\xff\xff", b'"just a string"'],
]  # fmt: skip


def test_edge_values_render_as_the_python_rules_render_them() -> None:
    native, expected = _both(_ROW_EDGES)
    assert native == expected


def _joined(members: list[str]) -> bytes:
    return ",".join(members).encode()


@st.composite
def _rows(draw: st.DrawFn) -> list[bytes | None]:
    def maybe(strategy: st.SearchStrategy[bytes]) -> bytes | None:
        return draw(st.one_of(st.none(), strategy))

    single = draw(st.floats(width=32, allow_nan=False, allow_infinity=False))
    # MySQL prints a FLOAT with the digits that identify it as a 32-bit float
    printed = f"{single:.9g}"
    stamp = draw(st.datetimes(dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18)))
    time_us = draw(st.integers(-838 * 3_600_000_000, 838 * 3_600_000_000))
    sign, magnitude = ("-" if time_us < 0 else ""), abs(time_us)
    seconds, micros = divmod(magnitude, 1_000_000)
    time_text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    json_doc = draw(
        st.recursive(
            st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=5)
            | st.floats(allow_nan=False, allow_infinity=False),
            lambda inner: st.lists(inner, max_size=3)
            | st.dictionaries(st.text(max_size=4), inner, max_size=3),
            max_leaves=6,
        )
    )  # fmt: skip
    return [
        _text(draw(st.integers(-(2**31), 2**31 - 1))),
        maybe(st.integers(0, 2**64 - 1).map(_text)),
        maybe(st.integers(-(2**23), 2**23 - 1).map(_text)),
        maybe(st.sampled_from([0, 1901, 2024, 2155]).map(lambda y: f"{y:04d}".encode())),
        None if struct.pack("<f", single) == struct.pack("<f", -0.0) else printed.encode(),
        maybe(st.floats(allow_nan=False, allow_infinity=False).map(lambda f: repr(f).encode())),
        _text(
            Decimal(draw(st.integers(-(10**20) + 1, 10**20 - 1))).scaleb(-4).quantize(
                Decimal("0.0001")
            )
        ),
        maybe(st.dates(dt.date(1000, 1, 1)).map(lambda d: d.isoformat().encode())),
        stamp.isoformat(" ", "milliseconds").encode(),
        maybe(st.just(stamp.isoformat(" ", "microseconds").encode())),
        (time_text + f".{micros // 10_000:02d}").encode(),
        maybe(st.text().map(str.encode)),
        maybe(st.binary(min_size=4, max_size=4)),
        maybe(st.binary(max_size=40)),
        maybe(st.sampled_from([b"small", b"it's", b""])),
        maybe(st.lists(st.sampled_from(["d", "a", "c"]), unique=True).map(_joined)),
        maybe(st.sampled_from([b"\x00", b"\x01"])),
        maybe(st.binary(min_size=5, max_size=5)),
        maybe(st.just(json.dumps(json_doc).encode())),
    ]  # fmt: skip


@given(st.lists(_rows(), min_size=1, max_size=20))
def test_generated_rows_render_as_the_python_rules_render_them(
    rows: list[list[bytes | None]],
) -> None:
    native, expected = _both(rows)
    assert native == expected


def test_a_row_the_table_cannot_hold_is_a_value_error_naming_the_column() -> None:
    native = QueriedRows([described(c, None) for c in COLUMNS], list(KEY))
    row = [b"x"] + [None] * (len(COLUMNS) - 1)
    with pytest.raises(ValueError, match=r'"id".*integer'):
        native.push(_packets([row]))


def test_the_servers_error_packet_is_its_code_and_message() -> None:
    native = QueriedRows([described(c, None) for c in COLUMNS], list(KEY))
    error = b"\xff\x28\x04#HY000Query execution was interrupted"
    with pytest.raises(ValueError, match="interrupted") as raised:
        native.push(len(error).to_bytes(3, "little") + b"\x01" + error)
    assert raised.value.args == (1064, "Query execution was interrupted")
    assert native.ended


class _Result:
    unbuffered_active = True
    connection: object = None


class _Connection:
    """The parts of PyMySQL's connection queried_rows reads (a socket's bytes, its close)."""

    def __init__(self, stream: bytes) -> None:
        self._rfile = io.BufferedReader(io.BytesIO(stream))
        self.forced = False

    def _force_close(self) -> None:
        self.forced = True


class _Cursor:
    def __init__(self, stream: bytes) -> None:
        self._result = _Result()
        self.connection = _Connection(stream)


def test_queried_rows_come_a_file_at_a_time_and_leave_the_result_read() -> None:
    rows = [[str(n).encode()] + [None] * (len(COLUMNS) - 1) for n in range(5)]
    cursor = _Cursor(_packets(rows))
    parts = list(queried_rows(cursor, COLUMNS, KEY, 2, "db:3306"))
    assert [len(keys) for keys, _ in parts] == [2, 2, 1]
    assert [json.loads(k)["id"] for keys, _ in parts for k in keys.to_pylist()] == list(range(5))
    assert not cursor._result.unbuffered_active
    assert not cursor.connection.forced


def test_a_servers_error_mid_result_is_pymysqls_error_and_the_socket_is_dropped() -> None:
    error = b"\xff\x28\x04#HY000Query execution was interrupted"
    stream = _packets([[b"1"] + [None] * (len(COLUMNS) - 1)])[:-9]  # the rows, not the EOF
    stream += len(error).to_bytes(3, "little") + b"\x02" + error
    cursor = _Cursor(stream)
    with pytest.raises(pymysql.err.OperationalError, match="interrupted"):
        list(queried_rows(cursor, COLUMNS, KEY, 100, "db:3306"))
    assert cursor.connection.forced, "what followed the error is unknown: the socket goes"
    assert not cursor._result.unbuffered_active


def test_a_connection_closed_mid_result_is_a_source_connection_error() -> None:
    cursor = _Cursor(_packets([[b"1"] + [None] * (len(COLUMNS) - 1)])[:-9])
    with pytest.raises(SourceConnectionError, match=r"db:3306 closed the connection"):
        list(queried_rows(cursor, COLUMNS, KEY, 100, "db:3306"))
    assert cursor.connection.forced
