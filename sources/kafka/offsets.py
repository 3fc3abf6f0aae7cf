"""The ``kafka`` connector's offsets: the next offset to read per topic-partition, as JSON.

In the ``txn-cdc`` envelope (:mod:`..offsets`), an offset holds what Spark's Kafka source holds,
the next offset of each topic-partition in the same form (``{"dbz.public.orders": {"0": 123}}``),
and what was delivered, to recognise Debezium's repeats after a restart::

    {"v": 1, "checkpoint": 7, "emitted": 120,
     "topics": {"dbz.public.orders": {"0": 123, "1": 98}, "dbz.transaction": {"0": 412}},
     "delivered": {"high": "pg:...", "snapshot": true},
     "schemas": {"public.orders": {"columns": [...], "key": []}}}

A partition the offset does not name is read from its first offset: a partition added to a
topic, or a topic that starts to match ``subscribePattern``, after the offset was written.
Keys are written sorted, partitions in numeric order: Spark compares offsets as JSON text.
``schemas`` (with ``columnTypes=true``; absent in offsets older than it) is each table's schema as
delivered up to the cut (:mod:`..debezium.envelope_schemas`).

Pure Python; runs on the driver and on executors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_ckpt.model.schema_changes import TableSchema

from ..offsets import OffsetHeader, offset_json, read_offset

__all__ = ["KafkaOffset", "TopicPartition"]

TopicPartition = tuple[str, int]
"""A partition of a topic: ``(topic, partition)``."""


@dataclass(frozen=True)
class KafkaOffset:
    """A cut across the topics' partitions.

    Attributes
    ----------
    checkpoint
        Id of the checkpoint this offset ends (-1 for the initial offset).
    emitted
        Units (transactions, the snapshot, chunks) before the cut.
    positions
        The next offset to read of each partition named; others start at their first offset.
    high
        The furthest source position delivered (Debezium's repeats at or before it are dropped).
    snapshot
        Whether an initial snapshot was delivered (another one is Debezium's repeat).
    schemas
        Each table's schema as delivered up to the cut; None without ``columnTypes`` and in
        offsets older than it.
    """

    checkpoint: int
    emitted: int
    positions: Mapping[TopicPartition, int] = field(default_factory=dict)
    high: str | None = None
    snapshot: bool = False
    schemas: Mapping[str, TableSchema] | None = None

    def position(self, topic: str, partition: int) -> int | None:
        """The next offset of ``topic``'s ``partition``; None: from its first offset."""
        return self.positions.get((topic, partition))

    def to_json(self) -> dict[str, Any]:
        """Render in the envelope, keys in a fixed order."""
        topics: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(self.positions.items()):
            topics.setdefault(topic, {})[str(partition)] = offset
        body: dict[str, Any] = {
            "topics": topics,
            "delivered": {"high": self.high, "snapshot": self.snapshot},
        }
        if self.schemas is not None:
            body["schemas"] = {t: self.schemas[t].to_json() for t in sorted(self.schemas)}
        return offset_json(OffsetHeader(self.checkpoint, self.emitted), body)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> KafkaOffset:
        """Parse an offset this connector wrote.

        Raises
        ------
        LogRewrittenError
            When ``value`` is not an offset of this connector (another source's checkpoint).
        """
        return read_offset(value, "kafka", cls._from_body)

    @classmethod
    def _from_body(cls, header: OffsetHeader, value: Mapping[str, Any]) -> KafkaOffset:
        positions: dict[TopicPartition, int] = {}
        for topic, partitions in value["topics"].items():
            for partition, offset in partitions.items():
                if int(offset) < 0:
                    raise ValueError(f"negative offset {offset} for {topic}/{partition}")
                positions[(str(topic), int(partition))] = int(offset)
        delivered = value["delivered"]
        high = delivered["high"]
        schemas = value.get("schemas")
        return cls(
            header.checkpoint,
            header.emitted,
            positions,
            None if high is None else str(high),
            bool(delivered["snapshot"]),
            None if schemas is None else {t: TableSchema.from_json(s) for t, s in schemas.items()},
        )
