"""The ``kafka`` connector: Debezium's topics read as whole units (DESIGN.md beside this file).

The driver plans (:mod:`.planner`: every partition read up to the trigger's target, units
assembled natively); a batch ends every partition where its records of the batch's units end,
and its Spark partitions are offset ranges that executors read from the brokers
(:mod:`.reader`). Offsets are Spark's per-partition JSON (:mod:`.offsets`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from spark_ckpt.errors import ConfigError, LogRewrittenError
from spark_ckpt.model.availability import AVAILABLE, SnapshotAvailability
from spark_ckpt.model.schema_changes import TableSchema

from ..connector import ChangeConnector, Plan, PlannedBatch
from ..debezium_format.envelope_schemas import PlannedSchemas, SchemaRow, follow_units
from ..gate import Cut
from ..options import SourceOptions
from .client import new_consumer, require_client
from .offsets import KafkaOffset, TopicPartition
from .options import KafkaOptions
from .planner import KafkaPlanner
from .reader import KafkaPartition, read_partition

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import Consumer


__all__ = ["KafkaConnector", "build"]

SOURCE = "kafka"
"""The ``source`` column of rows whose record names no Debezium server."""


class KafkaConnector(ChangeConnector):
    """Reads Debezium's Kafka topics as whole transactions, snapshot and chunks.

    Parameters
    ----------
    options
        The connector's options.
    gated
        False (option ``gate=off``) is refused: a Kafka batch can only end at a unit boundary.
    column_types
        Add the ``column_types`` column from the records' Kafka Connect envelopes.
    key_columns
        Per table, the columns that make the key of a change whose record has none.
    """

    name = "kafka"

    def __init__(
        self,
        options: KafkaOptions,
        *,
        gated: bool = True,
        column_types: bool = False,
        key_columns: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        if not gated:
            raise ConfigError(
                "the kafka connector cannot run with gate=off: its batches end every partition "
                "at a unit boundary"
            )
        self.options = options
        self.column_types = column_types
        self.key_columns = {t: list(c) for t, c in (key_columns or {}).items()}
        self._consumer: Consumer | None = None
        self._planner: KafkaPlanner | None = None
        self._available_now: dict[TopicPartition, int] | None = None
        self._schema_changes: list[str] = []

    def __getstate__(self) -> dict[str, Any]:
        """What executors get: no client and no planning state (they read by partition)."""
        state = dict(self.__dict__)
        state["_consumer"] = None
        state["_planner"] = None
        return state

    @property
    def consumer(self) -> Consumer:
        """The driver's consumer, created on first use (driver)."""
        if self._consumer is None:
            self._consumer = new_consumer(self.options.client, "driver")
        return self._consumer

    # -- driver: planning -----------------------------------------------------------------

    def initial_offset(self) -> dict[str, Any]:
        """Where a new query starts: ``startingOffsets`` resolved now (driver, once)."""
        starting = self.options.starting_offsets
        if starting == "earliest":
            return KafkaOffset(-1, 0).to_json()
        planner = KafkaPlanner(self.options, KafkaOffset(-1, 0), self.consumer)
        planner.discover()
        positions: dict[TopicPartition, int] = {}
        for tp in planner.partitions:
            low, high = planner.watermarks(tp)
            if starting == "latest":
                positions[tp] = high
                continue
            given = starting.get(tp[0], {}).get(tp[1])
            if given is not None:
                positions[tp] = low if given == -2 else high if given == -1 else given
        return KafkaOffset(-1, 0, positions).to_json()

    def _planner_at(self, start: KafkaOffset) -> KafkaPlanner:
        if self._planner is None or self._planner.base != start:
            self._planner = KafkaPlanner(self.options, start, self.consumer)
        return self._planner

    def plan(self, start: dict[str, Any], max_changes: int | None) -> Plan:
        """Read every partition up to this trigger's target; the units it completed."""
        planner = self._planner_at(KafkaOffset.from_json(start))
        planner.scan(self._available_now)
        assembler = planner.assembler
        reason = assembler.holdup()
        held = None if reason is None else SnapshotAvailability.soft_failure(reason)
        return Plan(
            assembler.unit_sizes(),
            held,
            assembler.held_events,
            held_units=assembler.held_units,
            oldest_held=assembler.oldest_held(),
        )

    def availability(self, cut: Cut) -> SnapshotAvailability:
        """Available exactly at unit boundaries."""
        if cut.at_boundary:
            return AVAILABLE
        return SnapshotAvailability.soft_failure("a Kafka batch ends only at a unit boundary")

    def batch(self, cut: Cut, checkpoint_id: int) -> PlannedBatch:
        """The batch of the planned units up to ``cut``; its end is the next plan's base."""
        planner = self._planner
        assert planner is not None
        assert cut.at_boundary
        end, partitions = self._planned(planner, cut.unit, checkpoint_id)
        commits = [
            ts for *_, ts, _ in map(planner.assembler.unit, range(cut.unit + 1)) if ts is not None
        ]
        planner.advance(cut.unit + 1, end)
        return PlannedBatch(end.to_json(), list(partitions), max(commits, default=None))

    def _planned(
        self, planner: KafkaPlanner, last: int, checkpoint_id: int
    ) -> tuple[KafkaOffset, list[KafkaPartition]]:
        """The end offset and the partitions of a batch of planned units ``0..last``."""
        assembler = planner.assembler
        units = [assembler.unit(i) for i in range(last + 1)]
        ends = assembler.cut(units[-1][0])
        txns = tuple(
            (key, order, size, ts)
            for order, kind, key, size, ts, _ in units
            if kind == "transaction"
        )
        blocks = tuple(
            (order, key, size, ts)
            for order, kind, key, size, ts, _ in units
            if kind != "transaction"
        )
        base = planner.base
        schema_rows, schemas = self._follow_schemas(planner, last)
        positions = dict(base.positions)
        ranges: list[tuple[int, int, int]] = []
        for index, tp in enumerate(planner.partitions):
            positions[tp] = ends[index]
            if ends[index] > planner.starts[index]:
                ranges.append((index, planner.starts[index], ends[index]))
        partitions = [
            KafkaPartition(
                self.options.client,
                *planner.partitions[index],
                lo,
                hi,
                SOURCE,
                txns,
                blocks,
                tuple(assembler.segments(index, lo, hi)),
                self.options.poll_timeout,
                tuple(schema_rows),
            )
            for index, start, stop in ranges
            for lo, hi in _pieces(start, stop, ranges, self.options.min_partitions)
        ]
        end = KafkaOffset(
            checkpoint_id,
            base.emitted + last + 1,
            positions,
            units[-1][5],
            base.snapshot or any(kind == "snapshot" for _, kind, *_ in units),
            schemas,
        )
        self._schema_changes = [row.summary for row in schema_rows]
        return end, partitions

    def _follow_schemas(
        self, planner: KafkaPlanner, last: int
    ) -> tuple[list[SchemaRow], Mapping[str, TableSchema] | None]:
        """The schema change rows of planned units ``0..last`` and the schemas after them.

        Followed where rows carry their types (``columnTypes=true``); a transaction's rows are
        numbered by ``total_order``, the snapshot's and chunks' are not
        (:class:`~..debezium.envelope_schemas.PlannedSchemas`).
        """
        if not self.column_types:
            return [], planner.base.schemas
        assembler = planner.assembler
        planned = []
        for index in assembler.schema_units():
            if index > last:
                break
            order, kind, *_ = assembler.unit(index)
            block = kind in ("snapshot", "chunk")
            planned.append(
                PlannedSchemas(order, assembler.unit_schemas(index), kind == "snapshot", block)
            )
        return follow_units(planner.base.schemas, planned)

    def replan(self, start: dict[str, Any], end: dict[str, Any]) -> list[object]:
        """Re-plan a logged batch after a restart: the same units, the same ranges."""
        first, last = KafkaOffset.from_json(start), KafkaOffset.from_json(end)
        planner = KafkaPlanner(self.options, first, self.consumer)
        planner.scan(dict(last.positions))
        count = last.emitted - first.emitted
        found = len(planner.assembler.unit_sizes())
        if count == 0:
            return []
        if found < count:
            raise LogRewrittenError(
                f"re-planning the logged batch {last.checkpoint} found {found} complete units "
                f"up to its end offsets, not {count}: records the batch was planned from are "
                f"gone from Kafka or changed"
            )
        replanned, partitions = self._planned(planner, count - 1, last.checkpoint)
        if replanned.positions != last.positions:
            raise LogRewrittenError(
                f"re-planning the logged batch {last.checkpoint} now ends at "
                f"{replanned.to_json()['topics']}, but it was logged ending at "
                f"{end.get('topics')}: the topics changed behind the query"
            )
        self._planner = None
        return list(partitions)

    def prepare_available_now(self) -> None:
        """Fix every partition's current end as the target of ``Trigger.availableNow``."""
        planner = KafkaPlanner(self.options, KafkaOffset(-1, 0), self.consumer)
        planner.discover()
        self._available_now = {tp: planner.watermarks(tp)[1] for tp in planner.partitions}

    # -- executors: reading ---------------------------------------------------------------

    def read(self, partition: object) -> Iterator[pa.RecordBatch]:
        """Yield the rows of one offset range (executor, once per task)."""
        assert isinstance(partition, KafkaPartition)
        return read_partition(partition, self.column_types, self.key_columns)

    def status(self) -> dict[str, Any] | None:
        """What this run's planner skipped and where it reads (driver, per trigger).

        ``schemaChanges``: the schema changes of the last batch planned, one line each, or None.
        ``behind.records``: offsets between the next batch's start and the partitions' ends.
        """
        planner = self._planner
        if planner is None:
            return None
        return {
            "connector": self.name,
            "transactionTopic": planner.transaction_topic,
            "partitions": len(planner.partitions),
            "skipped": dict(planner.assembler.skipped()) | {"lost": planner.lost},
            "deletedTopics": sorted({planner.partitions[i][0] for i in planner.gone}),
            "behind": {"records": planner.behind()},
            "schemaChanges": self._schema_changes or None,
        }

    def stop(self) -> None:
        """Close the driver's consumer (driver, once)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._planner = None


def _pieces(
    start: int, stop: int, ranges: Sequence[tuple[int, int, int]], least: int | None
) -> list[tuple[int, int]]:
    """``[start, stop)`` split by offset so that all ``ranges`` make at least ``least`` pieces.

    As Spark's Kafka source splits for ``minPartitions``: each range gets pieces in proportion
    to its share of the batch's offsets (a unit's records may then be read by several tasks;
    the plan's segments give each record its place whatever task reads it).
    """
    if least is None or len(ranges) >= least:
        return [(start, stop)]
    total = sum(hi - lo for _, lo, hi in ranges)
    count = max(1, min(stop - start, round(least * (stop - start) / total)))
    bounds = [start + (stop - start) * i // count for i in range(count + 1)]
    return list(itertools.pairwise(bounds))


def build(options: KafkaOptions, common: SourceOptions) -> KafkaConnector:
    """The connector (driver, once per query run).

    Raises
    ------
    MissingExtraError
        Without the ``kafka`` extra (confluent-kafka): at the query's start, naming the extra,
        not a bare ``ModuleNotFoundError`` from the first read.
    """
    require_client()
    return KafkaConnector(options, gated=common.gated, column_types=common.column_types)
