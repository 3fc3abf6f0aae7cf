"""Reading one Kafka offset range on an executor and turning it into rows.

A task reads ``[start, end)`` of one partition straight from the brokers (its own consumer,
``assign``-ed, never committing) and builds rows natively (``KafkaRows``) from the batch's plan:
which records are which unit's changes. Runs on executors, once per task.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from spark_ckpt.errors import DataLossError, SourceConnectionError

from ..debezium_format._native import KafkaRows
from ..debezium_format.envelope_schemas import SchemaRow, with_schema_rows
from ..debezium_format.types import typed_batch
from .client import (
    STALL_WARNING_S,
    is_out_of_range,
    is_transient,
    new_consumer,
    require_client,
)
from .client_config import masked

__all__ = ["KafkaPartition", "read_partition"]

_log = logging.getLogger(__name__)

_BLOCK = 10_000
_WAIT_S = 0.1  # one consume() call's wait: see planner._WAIT_S


@dataclass(frozen=True)
class KafkaPartition:
    """The picklable value of one input partition: ``[start, end)`` of a topic's partition.

    ``txns`` are the batch's transactions as ``(id, order, size, commit_ts_ms)``, ``blocks`` its
    other units as ``(order, key, size, commit_ts_ms)``, ``segments`` what the range's records
    are (``KafkaAssembler.segments``); ``poll_timeout`` how long reading may make no progress
    (``kafkaConsumer.pollTimeoutMs``); ``schema_rows`` the batch's schema change rows.
    """

    settings: Mapping[str, str] = field(repr=False)
    topic: str
    partition: int
    start: int
    end: int
    source: str
    txns: tuple[tuple[str, int, int, int | None], ...] = field(repr=False)
    blocks: tuple[tuple[int, str, int, int | None], ...] = field(repr=False)
    segments: tuple[tuple[int, int, str, int, int, int], ...] = field(repr=False)
    poll_timeout: float = 120.0
    schema_rows: tuple[SchemaRow, ...] = field(default=(), repr=False)

    def describe(self) -> str:
        """For messages: the range and the brokers, secrets masked."""
        brokers = masked(self.settings).get("bootstrap.servers", "?")
        return f"{self.topic}/{self.partition} [{self.start}, {self.end}) from {brokers}"


def read_partition(
    part: KafkaPartition,
    column_types: bool = False,
    key_columns: Mapping[str, Sequence[str]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of ``part`` as Arrow record batches (executor, once per task).

    Raises
    ------
    DataLossError
        When records of the range were deleted since the batch was planned.
    SourceConnectionError
        When reading makes no progress for ``part.poll_timeout`` seconds.
    MissingExtraError
        Without the ``kafka`` extra (confluent-kafka) where this executor runs.
    """
    client = require_client()
    KafkaError, KafkaPartitionId = client.KafkaError, client.TopicPartition  # noqa: N806

    if part.start >= part.end:
        return
    rows = KafkaRows(
        part.source,
        column_types,
        {t: list(c) for t, c in (key_columns or {}).items()},
        list(part.txns),
        list(part.blocks),
        list(part.segments),
    )
    name = f"{part.topic}/{part.partition}"
    consumer = new_consumer(part.settings, "executor")
    try:
        consumer.assign([KafkaPartitionId(part.topic, part.partition, part.start)])
        position = part.start
        progressed = time.monotonic()
        warned = False
        while position < part.end:
            messages = consumer.consume(num_messages=_BLOCK, timeout=_WAIT_S)
            offsets: list[int] = []
            keys: list[bytes | None] = []
            values: list[bytes | None] = []
            for message in messages:
                error = message.error()
                if error is not None:
                    if is_out_of_range(error):
                        # Whatever failOnDataLoss says: a planned unit can only be read whole.
                        raise DataLossError(
                            f"records of {part.describe()} were deleted after the batch was "
                            f"planned (retention, or the topic was recreated): the batch's units "
                            f"cannot be read whole. Restore from a savepoint taken before"
                        )
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    if is_transient(error) and not error.fatal():
                        # A broker down or restarting: librdkafka reconnects by itself; the
                        # stall bound below (pollTimeoutMs) decides.
                        if not warned:
                            warned = True
                            _log.warning(
                                "reading %s: %s; the client reconnects and reads on, for up to "
                                "%.0fs without progress (kafkaConsumer.pollTimeoutMs)",
                                part.describe(),
                                error.str(),
                                part.poll_timeout,
                            )
                        continue
                    raise SourceConnectionError(f"reading {part.describe()} failed: {error.str()}")
                offset = message.offset()
                if offset is None or offset >= part.end or offset < position:
                    continue
                offsets.append(offset)
                keys.append(message.key())
                values.append(message.value())
                position = offset + 1
            if offsets:
                rows.feed(name, offsets, keys, values)
                progressed = time.monotonic()
                built = rows.take_rows()
                if built is not None:
                    yield with_schema_rows(_batch(built, column_types), part.schema_rows)
                continue
            # Offsets without a record for the application (transaction markers, aborted
            # records): the consumer's position moves past them.
            (moved,) = consumer.position([KafkaPartitionId(part.topic, part.partition)])
            if moved.offset is not None and moved.offset > position:
                position = min(int(moved.offset), part.end)
                progressed = time.monotonic()
            stalled = time.monotonic() - progressed
            if position < part.end and stalled > STALL_WARNING_S and not warned:
                warned = True
                _log.warning(
                    "reading %s has made no progress at offset %s for %.0fs (the brokers "
                    "unreachable?): waiting for up to %.0fs (kafkaConsumer.pollTimeoutMs)",
                    part.describe(),
                    position,
                    stalled,
                    part.poll_timeout,
                )
            if position < part.end and stalled > part.poll_timeout:
                raise SourceConnectionError(
                    f"reading {part.describe()} made no progress at offset {position} for "
                    f"{part.poll_timeout:.0f}s (kafkaConsumer.pollTimeoutMs): the brokers are "
                    f"unreachable"
                )
    finally:
        consumer.close()


def _batch(built: pa.StructArray, column_types: bool) -> pa.RecordBatch:
    return typed_batch(built) if column_types else pa.RecordBatch.from_struct_array(built)
