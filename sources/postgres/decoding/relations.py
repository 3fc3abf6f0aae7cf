"""pgoutput's relations: the ``R`` messages that describe a table, kept per schema version.

pgoutput sends a relation's description before its first change in each decoding call and again
after its schema changed; a change refers to it by relation id. :class:`RelationCatalog` keeps
every version seen, so a change stored on the driver names the exact description executors
render it with. :class:`MessageCursor` reads pgoutput's big-endian fields. Pure Python.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from spark_ckpt.errors import ChangeDecodeError

__all__ = ["U32", "U64", "MessageCursor", "Relation", "RelationCatalog"]

_U16 = struct.Struct(">h")
U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class Relation:
    """A relation as a ``R`` message described it, with its columns' types named.

    Attributes
    ----------
    table
        ``schema.table``.
    columns
        ``(name, type)`` in column order, types as ``format_type`` spells them (as wal2json).
    identity
        Per column: part of the replica identity (what a ``K`` old tuple holds).
    key
        The primary key's columns (the output's ``key``; empty without a primary key).
    """

    table: str
    columns: tuple[tuple[str, str], ...]
    identity: tuple[bool, ...]
    key: tuple[str, ...]


class MessageCursor:
    """Reads pgoutput's big-endian fields from one message (driver and executors)."""

    __slots__ = ("at", "data")

    def __init__(self, data: bytes, at: int = 0) -> None:
        self.data = data
        self.at = at

    def byte(self) -> int:
        """One byte."""
        value = self.data[self.at]
        self.at += 1
        return value

    def int16(self) -> int:
        """A signed 16-bit integer."""
        (value,) = _U16.unpack_from(self.data, self.at)
        self.at += 2
        return int(value)

    def uint32(self) -> int:
        """An unsigned 32-bit integer."""
        (value,) = U32.unpack_from(self.data, self.at)
        self.at += 4
        return int(value)

    def int32(self) -> int:
        """A signed 32-bit integer."""
        (value,) = _I32.unpack_from(self.data, self.at)
        self.at += 4
        return int(value)

    def uint64(self) -> int:
        """An unsigned 64-bit integer."""
        (value,) = U64.unpack_from(self.data, self.at)
        self.at += 8
        return int(value)

    def int64(self) -> int:
        """A signed 64-bit integer."""
        (value,) = _I64.unpack_from(self.data, self.at)
        self.at += 8
        return int(value)

    def string(self) -> str:
        """A NUL-terminated UTF-8 string."""
        end = self.data.index(0, self.at)
        value = self.data[self.at : end].decode()
        self.at = end + 1
        return value

    def tuple_data(self) -> list[str | bool | None]:
        """``TupleData``: per column its text, None (null) or False (an unchanged TOAST value)."""
        values: list[str | bool | None] = []
        for _ in range(self.int16()):
            kind = self.byte()
            if kind == 0x74:  # 't': text
                length = self.int32()
                values.append(self.data[self.at : self.at + length].decode())
                self.at += length
            elif kind == 0x6E:  # 'n': null
                values.append(None)
            elif kind == 0x75:  # 'u': unchanged TOASTed value, not sent
                values.append(False)
            else:
                raise ChangeDecodeError(
                    f"pgoutput tuple data with column kind {kind!r} (binary mode is not used)"
                )
        return values


class RelationCatalog:
    """The relations of a stream, each schema version once (driver, across peeks).

    Parameters
    ----------
    type_name
        ``(type oid, typmod) -> format_type`` text (one catalog query per new pair).
    primary_key
        ``schema.table -> primary key column names``.
    """

    def __init__(
        self,
        type_name: Callable[[int, int], str],
        primary_key: Callable[[str], tuple[str, ...]],
    ) -> None:
        self._type_name = type_name
        self._primary_key = primary_key
        self.versions: list[Relation] = []
        self._index: dict[Relation, int] = {}
        self.current: dict[int, int] = {}
        """relation id -> index into :attr:`versions`, as of the last ``R`` message read."""

    def learn(self, data: bytes) -> Relation:
        """Read an ``R`` message: the relation's current description (returned)."""
        cursor = MessageCursor(data, 1)
        relid = cursor.uint32()
        table = f"{cursor.string()}.{cursor.string()}"
        cursor.byte()  # replica identity setting: the column flags say which columns are in it
        columns, identity = [], []
        for _ in range(cursor.int16()):
            flags = cursor.byte()
            name = cursor.string()
            oid, typmod = cursor.uint32(), cursor.int32()
            columns.append((name, self._type_name(oid, typmod)))
            identity.append(bool(flags & 1))
        relation = Relation(table, tuple(columns), tuple(identity), self._primary_key(table))
        index = self._index.get(relation)
        if index is None:
            index = self._index[relation] = len(self.versions)
            self.versions.append(relation)
        self.current[relid] = index
        return relation

    def of(self, relid: int, lsn: str) -> Relation:
        """The relation a change refers to."""
        index = self.current.get(relid)
        if index is None:
            raise ChangeDecodeError(
                f"pgoutput sent a change of relation {relid} at LSN {lsn} before describing it"
            )
        return self.versions[index]
