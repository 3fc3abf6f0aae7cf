"""A table with a column of every type the mysql connector decodes, and rows at their extremes.

The unit tests' captured binlog (``bench/capture_mysql_types_fixture.py``) and the typed-mirror
integration test write the same rows. :func:`source_rows` reads them back as the server prints
them, in the forms a typed mirror holds, for an exact comparison.
"""

from __future__ import annotations

import struct
from datetime import timezone
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.servers.mariadb import MariaDbServer

__all__ = ["COLUMNS", "STATEMENTS", "TABLE", "source_rows"]

TABLE = """CREATE TABLE every_type (
  id INT PRIMARY KEY,
  t TINYINT, tu TINYINT UNSIGNED, s SMALLINT, su SMALLINT UNSIGNED,
  m MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED, b BIGINT, bu BIGINT UNSIGNED,
  d DECIMAL(12,4), dw DECIMAL(50,10), f FLOAT, dbl DOUBLE,
  dt DATE, dtm DATETIME, dtm6 DATETIME(6), ts TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL,
  tm TIME, tm6 TIME(6), y YEAR,
  c CHAR(4), vc VARCHAR(300), tx TEXT, l1 VARCHAR(20) CHARACTER SET latin1,
  bin BINARY(4), vb VARBINARY(20), bl BLOB,
  js JSON, e ENUM('small','medium','large'), st SET('a','b','c','d'),
  bt1 BIT(1), bt BIT(10), bt64 BIT(64)
) CHARACTER SET utf8mb4"""

STATEMENTS = [
    # 1: the low extremes
    "INSERT INTO every_type VALUES (1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, "
    "-9223372036854775808, 0, -99999999.9999, -1234567890123456789012345678901234567890.0123456789,"
    " -3.4e38, -1.7976931348623157e308, '1000-01-01', '1000-01-01 00:00:00', "
    "'1000-01-01 00:00:00.000001', '1970-01-01 00:00:01', '1970-01-01 00:00:01.001', "
    "'-838:59:59', '-00:00:00.000001', 1901, '', '', '', '', x'00000000', x'', x'', "
    "'[]', 'small', '', b'0', b'0', b'0')",
    # 2: the high extremes
    "INSERT INTO every_type VALUES (2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, "
    "4294967295, 9223372036854775807, 18446744073709551615, 99999999.9999, "
    "1234567890123456789012345678901234567890.0123456789, 3.4e38, 1.7976931348623157e308, "
    "'9999-12-31', '9999-12-31 23:59:59', '9999-12-31 23:59:59.999999', "
    "'2038-01-19 03:14:07', '2038-01-19 03:14:07.999', '838:59:59', '838:59:59.000000', 2155, "
    "'abcd', REPEAT('x', 300), REPEAT('y', 1000), 'zzz', x'ffffffff', x'00ff00', x'deadbeef', "
    "'{\"k\": [1, 2.5, \"three\", null, true]}', 'large', 'a,b,c,d', b'1', b'1111111111', "
    "b'1111111111111111111111111111111111111111111111111111111111111111')",
    # 3: nulls (every column but the key)
    "INSERT INTO every_type (id) VALUES (3)",
    # 4: ordinary values, text in several scripts and character sets
    "INSERT INTO every_type VALUES (4, 7, 200, -300, 40000, 12345, 54321, 42, 3000000000, "
    "-42, 9223372036854775808, 1.5, 0.0000000001, 1.1, 0.1, '2024-02-29', "
    "'2024-02-29 13:05:00', '2024-02-29 13:05:00.250000', '2024-02-29 12:05:00', "
    "'2024-02-29 12:05:00.125', '13:05:00', '-25:00:00.500000', 2024, 'né', 'Grüße, 世界 🎉', "
    "'línea\nnueva', 'café', x'0102', x'cafe', x'00', '{\"a\": {\"b\": \"ü\"}}', 'medium', "
    "'d,b', b'1', b'0000000101', "
    "b'1000000000000000000000000000000000000000000000000000000000000000')",
    # an update of row 4 (before and after images), a delete of row 2
    "UPDATE every_type SET vc = 'changed', st = 'c', d = -0.0001, bu = 1 WHERE id = 4",
    "DELETE FROM every_type WHERE id = 2",
]


COLUMNS = [
    "id",
    "t",
    "tu",
    "s",
    "su",
    "m",
    "mu",
    "i",
    "iu",
    "b",
    "bu",
    "d",
    "dw",
    "f",
    "dbl",
    "dt",
    "dtm",
    "dtm6",
    "ts",
    "ts3",
    "tm",
    "tm6",
    "y",
    "c",
    "vc",
    "tx",
    "l1",
    "bin",
    "vb",
    "bl",
    "js",
    "e",
    "st",
    "bt1",
    "bt",
    "bt64",
]
"""``every_type``'s columns in order."""
_AS_TEXT = frozenset({"dw", "tm", "tm6"})  # mirrored as strings: the server's own text
_BITS = frozenset({"bt1", "bt", "bt64"})
_ZONED = frozenset({"ts", "ts3"})


def source_rows(
    server: MariaDbServer, database: str, table: str = "every_type"
) -> dict[int, dict[str, Any]]:
    """``every_type``'s rows (or those of ``table``, made alike) by ``id``, as a mirror holds them.

    The server prints what the mirror keeps as text (``CAST(... AS CHAR)``: a ``DECIMAL(50,10)``
    and ``TIME``) and gives ``BIT`` as a number; a ``TIMESTAMP`` (read in UTC: the test server's
    time zone) gets its zone, a ``FLOAT`` is the 32-bit float a mirror's ``float`` holds.
    """
    selected = ", ".join(
        f"CAST({c} AS CHAR) AS {c}" if c in _AS_TEXT else f"{c} + 0 AS {c}" if c in _BITS else c
        for c in COLUMNS
    )
    with server.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute("SET time_zone = '+00:00'")
        cursor.execute(f"SELECT {selected} FROM {table}")
        rows = [dict(zip(COLUMNS, row, strict=True)) for row in cursor.fetchall()]
    return {row["id"]: {c: _mirrored(c, v) for c, v in row.items()} for row in rows}


def _mirrored(column: str, value: Any) -> Any:
    if value is None:
        return None
    if column in _ZONED:
        return value.replace(tzinfo=timezone.utc)
    if column == "f":
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if column in _BITS:
        number = int(value)
        return bool(number) if column == "bt1" else number
    return value
