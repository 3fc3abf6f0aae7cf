"""Offsets of the ``debezium-json`` connector: a cut in the change log, as Spark logs it.

An offset is the state of the transaction assembler at a cut, small enough to live in Spark's
offset log::

    {"v": 1, "checkpoint": 7, "emitted": 120, "partial": 0,
     "scan": ["0003.jsonl", 52311, 804], "consumed": [2, 104858],
     "open": [["tx-981", "0003.jsonl", 50022, 790], ...],
     "delivered": {"high": "pg:...:...", "snapshot": ["pg:...", true]},
     "schemas": {"public.orders": {"columns": [...], "key": []}, ...}}

``emitted`` transactions (in END order) are before the cut, plus ``partial`` events of the next
one (always 0 unless the gate is off). ``scan`` is how far the log was consumed; ``consumed``
counts the files before ``scan``'s file and their bytes; ``open`` lists the transactions consumed
in part but not emitted, with the position of their first record. ``delivered`` (absent while
empty) is what recognises Debezium's repeats after the cut: the furthest source position
delivered, and whether an initial snapshot was delivered and changes after it. With
``fileOrder=natural`` a key ``"order": "natural"`` records the file order. ``schemas`` is
each table's schema as delivered before the cut's transaction (:mod:`.envelope_schemas`;
absent without ``columnTypes`` and in offsets older than it): a cut inside a transaction (gate
off) records the schemas before it, so the rest of it is numbered as the first part was. To
resume at an
offset, the log is re-read from the earliest open record to ``scan`` keeping only records of the
open transactions, then normally from ``scan``: the same ``(start, end)`` always yields the same
rows, because the log is append-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_ckpt.errors import StateFormatError
from spark_ckpt.model.schema_changes import TableSchema

from ..offsets import OffsetHeader, offset_json, read_offset
from .log_files import START, FileOrder, LogPosition, position_key
from .transactions import NOTHING_DELIVERED, Delivered

__all__ = ["LogOffset", "initial_offset"]


@dataclass(frozen=True)
class LogOffset:
    """A cut in the change log (see the module docstring for the JSON form).

    Attributes
    ----------
    checkpoint
        Id of the checkpoint this offset ends (-1 for the initial offset).
    emitted
        Transactions emitted before the cut, in END order.
    partial
        Events of transaction number ``emitted`` emitted before the cut (gate off only).
    scan
        Position up to which the log was consumed.
    consumed
        ``(files, bytes)`` of the files before ``scan``'s file: what a restart must find there.
        None in offsets written before it was recorded (nothing to check against).
    open
        ``(txn_id, first record position)`` of transactions consumed but not fully emitted,
        ordered by first position.
    order
        The file order the offset's positions are in.
    delivered
        What was delivered before the cut, to recognise Debezium's repeats after it.
    schemas
        Each table's schema as delivered before transaction ``emitted``; None in offsets
        written before they were recorded, and when no schema was seen.
    """

    checkpoint: int
    emitted: int
    partial: int
    scan: LogPosition
    consumed: tuple[int, int] | None
    open: tuple[tuple[str, LogPosition], ...]
    order: FileOrder = "name"
    delivered: Delivered = NOTHING_DELIVERED
    schemas: Mapping[str, TableSchema] | None = None

    @property
    def resume(self) -> LogPosition:
        """Where re-reading must start to rebuild the state at this offset."""
        firsts = [first for _, first in self.open]
        return min(firsts, default=self.scan, key=lambda p: position_key(p, self.order))

    def to_json(self) -> dict[str, Any]:
        """Render in the :mod:`..offsets` envelope, with a fixed key order."""
        body: dict[str, Any] = {"partial": self.partial, "scan": self.scan.to_json()}
        if self.consumed is not None:
            body["consumed"] = list(self.consumed)
        body["open"] = [[txn_id, *first.to_json()] for txn_id, first in self.open]
        if self.order != "name":
            body["order"] = self.order
        if self.delivered != NOTHING_DELIVERED:
            high, snapshot = self.delivered
            body["delivered"] = {
                "high": high,
                "snapshot": None if snapshot is None else list(snapshot),
            }
        if self.schemas is not None:
            body["schemas"] = {t: self.schemas[t].to_json() for t in sorted(self.schemas)}
        return offset_json(OffsetHeader(self.checkpoint, self.emitted), body)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> LogOffset:
        """Parse an offset written by :meth:`to_json`.

        Raises
        ------
        LogRewrittenError
            When ``value`` is not such an offset (for example a checkpoint of another source).
        """
        return read_offset(value, "debezium-json", cls._from_body)

    @classmethod
    def _from_body(cls, header: OffsetHeader, value: Mapping[str, Any]) -> LogOffset:
        open_items = tuple(
            (str(item[0]), LogPosition.from_json(list(item[1:]))) for item in value["open"]
        )
        consumed = value.get("consumed")
        order = value.get("order", "name")
        if order not in ("name", "natural"):
            raise StateFormatError(f"unknown file order {order!r}")
        delivered = NOTHING_DELIVERED
        if "delivered" in value:
            high = value["delivered"]["high"]
            snapshot = value["delivered"]["snapshot"]
            delivered = Delivered(
                None if high is None else str(high),
                None if snapshot is None else (snapshot[0], bool(snapshot[1])),
            )
        schemas = value.get("schemas")
        return cls(
            header.checkpoint,
            header.emitted,
            int(value["partial"]),
            LogPosition.from_json(value["scan"]),
            None if consumed is None else (int(consumed[0]), int(consumed[1])),
            open_items,
            order,
            delivered,
            None if schemas is None else {t: TableSchema.from_json(s) for t, s in schemas.items()},
        )


def initial_offset(order: FileOrder) -> LogOffset:
    """The offset before the first line of a log read in ``order``."""
    return LogOffset(-1, 0, 0, START, (0, 0), (), order)
