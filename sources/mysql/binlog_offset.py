"""Offsets of the ``mysql`` connector, as Spark logs them.

JSON, with a stable key order::

    {"v": 1, "checkpoint": k, "emitted": n,
     "file": "mariadb-bin.000003", "pos": 1234, "gtid": "0-1-42" | null,
     "server": "mariadb:1" | "mysql:<server_uuid>",   # absent in offsets written before it
     "schemas": {"tables": {...}, "renames": {...}}}   # once a captured table was seen

``file`` and ``pos`` are the binlog coordinates just after the last emitted transaction (its
``XID`` or ``COMMIT`` event ends there): the next batch starts with the transaction after it.
``gtid`` is the server's GTID state at that point where it has GTIDs (MariaDB's
``domain-server-seq`` list, MySQL's ``uuid:1-n`` set), kept exact transaction by transaction
(:mod:`.gtid`). ``server`` names the server whose binlog ``file`` and ``pos`` are in: a resume on
another server (a replica after a failover) or after the file left the binlog index starts from
``gtid`` instead, which a server of the same GTID history finds in its own binlog.
``schemas`` is what the stream delivered of each captured table's schema up to there
(:class:`~.schemas.SchemaState`): the next batch compares table maps with it.

A query with ``snapshot=initial`` starts at ``{"v": 1, "checkpoint": -1, "emitted": 0,
"phase": "snapshot"}``: no position yet, the snapshot (:mod:`.snapshot`) finds it. The snapshot's
batch ends at the binlog position the snapshot is consistent with, with the tables' schemas as
the snapshot read them. With ``snapshot=incremental`` the stream starts at the binlog's end at
the query's first start, and ``"snapshot": {...}`` holds the chunked snapshot's state
(:class:`~spark_ckpt.sources.chunks.IncrementalState`; its positions are
:attr:`BinlogPosition.ordinal` values) until every chunk is emitted. Pure; runs on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..chunks import IncrementalState
from ..offsets import OffsetHeader, offset_json, read_offset
from .schemas import SchemaState

__all__ = ["BinlogOffset", "BinlogPosition", "GtidStart"]


@dataclass(frozen=True, order=True)
class BinlogPosition:
    """Coordinates in the binlog: a file of the server's binlog index and a byte offset in it.

    Ordered as the server writes them: binlog files are numbered by their extension.
    """

    file: str
    pos: int

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"

    @property
    def ordinal(self) -> int:
        """The position as one ordered integer: the file's number, then the byte offset.

        A binlog file is at most 1 GiB (``max_binlog_size``), so the offset fits in 32 bits.
        """
        return (int(self.file.rsplit(".", 1)[1]) << 32) | self.pos

    @classmethod
    def from_ordinal(cls, ordinal: int, like: BinlogPosition) -> BinlogPosition:
        """The position of :attr:`ordinal`, in the binlog of ``like`` (its file name's base)."""
        base, digits = like.file.rsplit(".", 1)
        number = ordinal >> 32
        return cls(f"{base}.{number:0{len(digits)}d}", ordinal & 0xFFFFFFFF)


@dataclass(frozen=True)
class GtidStart:
    """Where a read starts on a server that did not write the offset: after a GTID state.

    The server finds the transaction after ``gtid`` in its own binlog; the positions read from
    there on are its own.
    """

    gtid: str

    def __str__(self) -> str:
        return f"GTID {self.gtid}"


@dataclass(frozen=True)
class BinlogOffset:
    """A position of the ``mysql`` connector (see the module docstring)."""

    checkpoint: int
    emitted: int
    position: BinlogPosition | None
    """None while the initial snapshot is still to be delivered (it finds the position)."""
    gtid: str | None = None
    schemas: SchemaState | None = None
    server: str | None = None
    """The identity of the server whose binlog ``position`` is in (:func:`.server.identity`);
    None in offsets written before it was recorded."""
    incremental: IncrementalState | None = None
    """The chunked snapshot's state while it runs (``snapshot=incremental``)."""

    @property
    def at(self) -> BinlogPosition:
        """The position of an offset past the snapshot phase."""
        assert self.position is not None, "a snapshot-phase offset has no binlog position"
        return self.position

    def to_json(self) -> dict[str, Any]:
        """The offset's JSON, keys in their fixed order."""
        header = OffsetHeader(self.checkpoint, self.emitted)
        if self.position is None:
            return offset_json(header, {"phase": "snapshot"})
        body: dict[str, Any] = {
            "file": self.position.file,
            "pos": self.position.pos,
            "gtid": self.gtid,
        }
        if self.server is not None:
            body["server"] = self.server
        if self.schemas is not None and (self.schemas.tables or self.schemas.renames):
            body["schemas"] = self.schemas.to_json()
        if self.incremental is not None:
            body["snapshot"] = self.incremental.to_json()
        return offset_json(header, body)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> BinlogOffset:
        """Parse an offset this connector wrote.

        Raises
        ------
        LogRewrittenError
            When ``value`` is not an offset of this connector.
        """

        def body(header: OffsetHeader, keys: Mapping[str, Any]) -> BinlogOffset:
            if keys.get("phase") == "snapshot":
                return cls(header.checkpoint, header.emitted, None)
            position = BinlogPosition(str(keys["file"]), int(keys["pos"]))
            gtid, schemas, server = keys.get("gtid"), keys.get("schemas"), keys.get("server")
            incremental = keys.get("snapshot")
            return cls(
                header.checkpoint,
                header.emitted,
                position,
                None if gtid is None else str(gtid),
                None if schemas is None else SchemaState.from_json(schemas),
                None if server is None else str(server),
                None if incremental is None else IncrementalState.from_json(incremental),
            )

        return read_offset(value, "mysql", body)
