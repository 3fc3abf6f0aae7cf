"""A table map's columns as the binlog client describes them, from the packet the server sent.

The native decoder (:mod:`._native`) reads the rows; the columns of each table map it meets are
described here by ``mysql-replication``'s own ``TableMapEvent`` (its reading of MySQL's and
MariaDB's optional metadata: names, signedness, character sets, ``ENUM`` and ``SET`` members,
the primary key), so a column is the same :class:`~.types.MySqlColumn` whichever path read it
and the schema history a checkpoint holds compares equal after an upgrade. The decoder hands
over a table map only when its bytes change (after DDL, in each binlog file): runs on the
driver, per distinct table map, and per format description event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .types import MySqlColumn

if TYPE_CHECKING:
    from ._native import Described

__all__ = ["TableMapColumns", "column_of", "described", "text_codec"]


class TableMapColumns:
    """Describes table maps with the client's classes, as its stream reader would (driver).

    ``control`` is the client's control connection (what its events ask for the server's kind,
    and for column names where the server wrote none).
    """

    def __init__(self, control: Any) -> None:
        self._control = control
        self._version: tuple[int, ...] = (0, 0, 0)
        self._post_header: Any = None

    def format_description(self, payload: bytes, checksum: bool) -> None:
        """The stream's format description: what the client needs to read its events."""
        event = self._event(payload, checksum)
        if event is not None:
            self._version, self._post_header = event.mysql_version, event.post_header_len

    def columns(self, payload: bytes, checksum: bool) -> tuple[MySqlColumn, ...]:
        """A table map packet's columns, in the table's order."""
        event = self._event(payload, checksum)
        if event is None:
            raise ValueError("the binlog client did not decode a table map packet")
        return tuple(column_of(column) for column in event.columns)

    def _event(self, payload: bytes, checksum: bool) -> Any:
        import pymysql.protocol
        from pymysqlreplication.event import FormatDescriptionEvent
        from pymysqlreplication.packet import BinLogPacketWrapper
        from pymysqlreplication.row_event import TableMapEvent

        wrapper = BinLogPacketWrapper(
            pymysql.protocol.MysqlPacket(payload, "utf8"),
            {},  # table maps by id: rows are not read here
            self._control,
            self._version,
            checksum,
            frozenset({FormatDescriptionEvent, TableMapEvent}),
            None,  # only_tables
            None,  # ignored_tables
            None,  # only_schemas
            None,  # ignored_schemas
            False,  # freeze_schema
            False,  # ignore_decode_errors
            False,  # verify_checksum (as the client's stream reader: TCP carries it whole)
            True,  # optional_meta_data
            False,  # enable_logging
            False,  # use_column_name_cache
            self._post_header,
        )
        return wrapper.event


def column_of(column: Any) -> MySqlColumn:
    """The client's column of a table map -> its description (``binlog_row_metadata=FULL``)."""
    bits = getattr(column, "bits", None)
    return MySqlColumn(
        name=str(column.name),
        code=int(column.type),
        unsigned=bool(column.unsigned),
        precision=getattr(column, "precision", None),
        scale=getattr(column, "decimals", None),
        charset=column.character_set_name,
        bits=int(bits) if bits is not None else None,
        fsp=int(getattr(column, "fsp", 0) or 0),
        length=getattr(column, "max_length", None),
        members=tuple(column.set_values or (column.enum_values or [""])[1:]),
        primary=bool(getattr(column, "is_primary", False)),
    )


def text_codec(charset: str | None) -> str | None:
    """The Python codec the client decodes a character set's text with (None: UTF-8)."""
    if charset is None:
        return None
    from pymysqlreplication.row_event import RowsEvent

    return str(RowsEvent.charset_to_encoding(charset))


def described(column: MySqlColumn, codec: str | None) -> Described:
    """A column as the native decoder takes its description (``codec``: its text's codec)."""
    return (
        column.name,
        column.code,
        column.unsigned,
        column.charset,
        codec,
        column.bits,
        column.fsp,
        column.length,
        list(column.members),
    )
