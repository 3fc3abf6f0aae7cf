"""Offsets of the ``postgres`` connector, as Spark logs them.

JSON, with a stable key order::

    {"v": 1, "checkpoint": k, "emitted": n,
     "phase": "snapshot" | "stream", "lsn": "0/16B3748" | null,
     "snapshot": {...},   # only while a snapshot=incremental runs (.incremental)
     "schemas": {...}}    # each captured table's schema as delivered up to here

``phase=snapshot`` is the start of a query with ``snapshot=initial``: the first batch is the whole
snapshot (one unit, ``op='r'``, ``txn_order`` 0), and it ends at ``phase=stream`` with
``lsn=null``, "from the slot's consistent point", so that a snapshot redone after a failed first
batch (with a new slot) still fits the logged offset. In the stream phase ``lsn`` is the end of the
last emitted transaction's commit record: the batch after it starts with the next transaction.
With ``snapshot=incremental`` the offset also says which chunks are done and pending
(:class:`~.incremental.IncrementalState`); chunks are units of their own, after a batch's
transactions. ``schemas`` (:class:`~spark_ckpt.model.schema_changes.TableSchema` per table) is
what the next batch compares relations with to find schema changes (:mod:`.schema_tracking`);
an offset without it (an older checkpoint) learns the schemas from the stream. Pure; runs on the
driver.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spark_ckpt.errors import StateFormatError
from spark_ckpt.model.schema_changes import TableSchema

from ..offsets import OffsetHeader, offset_json, read_offset
from .incremental import IncrementalState
from .lsn import format_lsn, parse_lsn

__all__ = ["PgOffset", "Phase", "offset_key"]

Phase = Literal["snapshot", "stream"]


@dataclass(frozen=True)
class PgOffset:
    """A position of the ``postgres`` connector (see the module docstring)."""

    checkpoint: int
    emitted: int
    phase: Phase
    lsn: int | None
    incremental: IncrementalState | None = None
    """``snapshot=incremental`` until its last chunk is emitted (key ``snapshot``)."""
    schemas: Mapping[str, TableSchema] | None = None
    """Each captured table's schema as delivered up to here (key ``schemas``)."""

    def with_schemas(self, schemas: Mapping[str, TableSchema] | None) -> PgOffset:
        """The same position with ``schemas`` (the offset as it is when None)."""
        if schemas is None:
            return self
        return PgOffset(
            self.checkpoint, self.emitted, self.phase, self.lsn, self.incremental, schemas
        )

    def to_json(self) -> dict[str, Any]:
        """Render in the :mod:`..offsets` envelope, with a fixed key order."""
        lsn = None if self.lsn is None else format_lsn(self.lsn)
        body: dict[str, Any] = {"phase": self.phase, "lsn": lsn}
        if self.incremental is not None:
            body["snapshot"] = self.incremental.to_json()
        if self.schemas:
            body["schemas"] = {t: self.schemas[t].to_json() for t in sorted(self.schemas)}
        return offset_json(OffsetHeader(self.checkpoint, self.emitted), body)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> PgOffset:
        """Parse :meth:`to_json`.

        Raises
        ------
        LogRewrittenError
            When ``value`` is not such an offset (a checkpoint of another source).
        """
        return read_offset(value, "postgres", cls._from_body)

    @classmethod
    def _from_body(cls, header: OffsetHeader, value: Mapping[str, Any]) -> PgOffset:
        phase = value["phase"]
        if phase not in ("snapshot", "stream"):
            raise StateFormatError(f"unknown phase {phase!r}")
        lsn = value["lsn"]
        incremental = value.get("snapshot")
        schemas = value.get("schemas")
        return cls(
            header.checkpoint,
            header.emitted,
            phase,
            None if lsn is None else parse_lsn(str(lsn)),
            None if incremental is None else IncrementalState.from_json(incremental),
            None if schemas is None else {t: TableSchema.from_json(s) for t, s in schemas.items()},
        )


def offset_key(offset: dict[str, Any]) -> str:
    """A key for an offset's JSON, the same however its keys are ordered."""
    return json.dumps(offset, sort_keys=True)
