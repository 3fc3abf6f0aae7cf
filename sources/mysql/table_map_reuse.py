"""A table map event read again with the same bytes reuses its first decoding.

The server writes a ``TABLE_MAP`` event before every rows event, so a stream of small
transactions carries the same table map thousands of times; ``mysql-replication`` 1.0 decodes
each one whole (its columns, the full row metadata, a ``Table`` built from them), which took a
third of the driver's time reading a binlog of three-row-event transactions (``bench/``'s
stream workload, profiled). A table map's decoding is a function of its bytes and of the
reader's settings, which one stream reader keeps: :func:`install` wraps the client's
``TableMapEvent.__init__`` so that the decodings of one reader are kept by the event's body and
an identical event takes the first one's, its ``Table`` included (so the rows events' column
list is the same object and :class:`~.binlog.TableMaps` describes it once). Any change the server
makes to a table (DDL) changes the map's bytes, so it is decoded anew. The class stays the
client's own, so what a reader is asked for is unchanged. Runs on the driver, per table map
event read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MAX_REUSED", "client_init", "install"]

MAX_REUSED = 1024
"""Decodings kept per reader: a read across many DDLs decodes again past this, never grows."""
_HEADER = 20
"""Bytes of the packet before the event's body: the OK byte and the 19-byte event header, which
the client's packet wrapper has read when it builds the event (its checksum check rewinds to
the same place)."""
_CACHE = "_spark_ckpt_table_maps"
"""Where one reader's decodings live: its control connection, one per stream reader."""
_replaced: list[Callable[..., None]] = []


def _decoded_once(
    event: Any, from_packet: Any, event_size: int, table_map: Any, ctl_connection: Any, **kw: Any
) -> None:
    """``TableMapEvent.__init__``, decoding a body this reader has seen only once."""
    from pymysqlreplication.event import BinLogEvent

    body = bytes(from_packet.packet.get_bytes(_HEADER, event_size))
    cache = _cache(ctl_connection)
    decoded = cache.get(body)
    if decoded is None:
        _replaced[0](event, from_packet, event_size, table_map, ctl_connection, **kw)
        if event._processed:  # a filtered-out map stops early: nothing worth keeping
            if len(cache) >= MAX_REUSED:
                cache.pop(next(iter(cache)))
            cache[body] = dict(event.__dict__)
        return
    # This event's own header (timestamp, packet, checksum check), then the decoding.
    BinLogEvent.__init__(event, from_packet, event_size, table_map, ctl_connection, **kw)
    for name, value in decoded.items():
        event.__dict__.setdefault(name, value)
    table_map[event.table_id] = event.table_obj


def _cache(ctl_connection: Any) -> dict[bytes, dict[str, Any]]:
    cache: dict[bytes, dict[str, Any]] | None = getattr(ctl_connection, _CACHE, None)
    if cache is None:
        cache = {}
        setattr(ctl_connection, _CACHE, cache)
    return cache


def install() -> None:
    """Make the client's table map events reuse an identical one's decoding (idempotent).

    Driver, per read.
    """
    from pymysqlreplication.row_event import TableMapEvent

    init = TableMapEvent.__dict__["__init__"]
    if init is not _decoded_once:
        _replaced.append(init)
        TableMapEvent.__init__ = _decoded_once


def client_init() -> Callable[..., None]:
    """The client's own ``TableMapEvent.__init__``, as before :func:`install` (tests compare)."""
    from pymysqlreplication.row_event import TableMapEvent

    init: Callable[..., None] = TableMapEvent.__dict__["__init__"]
    return _replaced[0] if _replaced else init
