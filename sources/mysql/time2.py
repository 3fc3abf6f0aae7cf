"""MySQL's ``TIME(fsp)`` binlog format, decoded exactly (the binlog client gets negatives wrong).

A ``TIME`` column is written in the binlog as MySQL 5.6's packed binary form (MariaDB writes the
same with ``mysql56_temporal_format``, its default): three bytes of ``hh:mm:ss`` offset by
``0x800000``, then the fraction in ``(fsp + 1) // 2`` bytes, big-endian; a negative value with a
fraction keeps the fraction reversed (``my_time_packed_from_binary`` in MySQL's
``mysys/my_time.cc``, ``TIME_from_longlong_time_packed`` for the fields). ``mysql-replication``
1.0 reads the fraction as if it were unsigned and separate, so ``-00:00:00.000001`` arrives as
``-00:00:00.999999`` (seen in the fixture a MariaDB server wrote:
``tests/unit/test_mysql_types.py``). :func:`install` replaces the client's decoder with
:func:`time2_value`. Pure Python; runs on the driver, per ``TIME`` value read.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

__all__ = ["CLIENT_READER", "client_reader", "install", "time2_value"]

CLIENT_READER = "_RowsEvent__read_time2"
"""The name of the client's ``TIME2`` reader (a private method of its ``RowsEvent``)."""
_replaced: list[Any] = []

_INT_OFFSET = 0x800000
_FRACTION_BYTES = {0: 0, 1: 1, 2: 1, 3: 2, 4: 2, 5: 3, 6: 3}
_FRACTION_SCALE = {1: 10_000, 2: 10_000, 3: 100, 4: 100, 5: 1, 6: 1}


def time2_value(raw: bytes, fsp: int) -> timedelta:
    """A ``TIME(fsp)`` value from its ``3 + (fsp + 1) // 2`` binlog bytes."""
    size = _FRACTION_BYTES[fsp]
    intpart = int.from_bytes(raw[:3], "big") - _INT_OFFSET
    fraction = int.from_bytes(raw[3 : 3 + size], "big") if size else 0
    if size and intpart < 0 and fraction:
        intpart += 1  # a negative value's fraction is stored as its complement
        fraction -= 1 << (8 * size)
    packed = (intpart << 24) + fraction * _FRACTION_SCALE.get(fsp, 1)
    magnitude = abs(packed)
    hms, micros = magnitude >> 24, magnitude & 0xFFFFFF
    hours, minutes, seconds = (hms >> 12) & 0x3FF, (hms >> 6) & 0x3F, hms & 0x3F
    value = timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=micros)
    return -value if packed < 0 else value


def _read_time2(event: Any, column: Any) -> timedelta:
    """The client's ``RowsEvent`` reader for a ``TIME2`` column, replaced (see the module)."""
    fsp = int(getattr(column, "fsp", 0) or 0)
    return time2_value(event.packet.read(3 + _FRACTION_BYTES[fsp]), fsp)


def install() -> None:
    """Make the binlog client decode ``TIME`` with :func:`time2_value` (idempotent; driver).

    Raises
    ------
    ImportError
        When the client's rows event has no ``TIME2`` reader to replace (another version of
        ``mysql-replication`` than the one this was written for: values would be unchecked).
    """
    from pymysqlreplication.row_event import RowsEvent

    reader = RowsEvent.__dict__.get(CLIENT_READER)
    if reader is None:
        raise ImportError(
            "mysql-replication's RowsEvent has no TIME2 reader to correct; install the version "
            "spark-ckpt's mysql extra names (pip install 'spark-ckpt[mysql]')"
        )
    if reader is not _read_time2:
        _replaced.append(reader)
        setattr(RowsEvent, CLIENT_READER, _read_time2)


def client_reader() -> Any:
    """The client's own ``TIME2`` reader, as it was before :func:`install` (tests compare)."""
    from pymysqlreplication.row_event import RowsEvent

    return _replaced[0] if _replaced else RowsEvent.__dict__[CLIENT_READER]
