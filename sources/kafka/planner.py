"""The ``kafka`` connector's driver-side planning: read every partition, assemble units.

A :class:`KafkaPlanner` lives in the query's reader process from a base offset on: each trigger
it finds the topics' partitions (new ones are read from their start), takes every partition's end
offset as the trigger's *target*, and consumes each partition up to it, feeding the records to
the native :class:`KafkaAssembler` (``sources/debezium_format/native/src/kafka``), which
releases units once every partition has been read up to the target in force when they closed
(DESIGN.md).

``maxChangesPerTrigger`` caps batches, not reading: a trigger reads every partition to its target
so that the units it closed can be released. What the planner holds meanwhile is each read
record's offset and owner (no payload), about 24 bytes per record of the backlog.

Runs on the driver, once per trigger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spark_ckpt.errors import ConfigError, DataLossError, SourceConnectionError

from ..debezium_format._native import KafkaAssembler
from .client import (
    METADATA_TIMEOUT_S,
    STALL_WARNING_S,
    is_out_of_range,
    is_transient,
    partitions_of,
    retrying,
    transaction_topic_for,
)
from .offsets import KafkaOffset, TopicPartition
from .options import KafkaOptions

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message

__all__ = ["KafkaPlanner"]

_log = logging.getLogger(__name__)

_BLOCK = 10_000  # records per consume() call
# How long one consume() call waits. Short: offsets that hold no record for the application (a
# Kafka transaction's commit marker, KIP-98) are passed only once a consume() call returned
# nothing, so a range ending in one (every range of a topic written transactionally) waits this
# long at its end. 1 s made reading the fixture's transactional topics 19 s instead of 0.4 s.
_WAIT_S = 0.1


class KafkaPlanner:
    """Planning state after ``base``: the assembler, the partitions and how far each was read.

    Parameters
    ----------
    options
        The connector's options.
    base
        The offset planning starts from (the last batch's end).
    consumer
        The driver's consumer (the connector owns it).
    """

    def __init__(self, options: KafkaOptions, base: KafkaOffset, consumer: Consumer) -> None:
        self.options = options
        self.base = base
        self.consumer = consumer
        self.assembler: KafkaAssembler = KafkaAssembler(
            base.emitted,
            base.high,
            base.snapshot,
            settle_ms=round(options.snapshot_settle * 1000),
            # transactionTopic=none: no END is ever read, so a record's transaction block
            # must not open a transaction (it would wait for ever); each change is a unit.
            transactions=options.transaction_topic != "",
        )
        self.partitions: list[TopicPartition] = []
        self.starts: list[int] = []
        """Where the next batch starts in each partition (registration order)."""
        self.next: list[int] = []
        """The next offset to read of each partition."""
        self.transaction_topic: str | None = options.transaction_topic or None
        self.lost = 0
        """Records skipped because Kafka no longer had them (``failOnDataLoss=false``)."""
        self.gone: set[int] = set()
        """Partitions of deleted topics, no longer read (``failOnDataLoss=false``)."""
        self.latest: dict[int, int] = {}
        """Each partition's end offset at the last scan, before any ``availableNow`` cap."""
        self.timeout = min(METADATA_TIMEOUT_S, options.poll_timeout)
        """Seconds a metadata or offset request may take."""
        self._warned_read = False

    # -- partitions -----------------------------------------------------------------------

    def watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        """``(first, end)`` offsets of a partition now (``end``: read_committed's last stable one).

        A transient error (a broker restarting, a leader moving: :func:`~.client.is_transient`)
        is retried, with a warning naming it, for up to ``kafkaConsumer.pollTimeoutMs``: while a
        broker restarts the client answers at once with ``NOT_LEADER_FOR_PARTITION`` or
        ``_UNKNOWN_PARTITION`` instead of waiting. Driver, per partition and trigger.

        Raises
        ------
        SourceConnectionError
            When the brokers do not answer within that bound, or refuse for good (the error
            named).
        """
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka import TopicPartition as KafkaPartition

        patience = self.options.poll_timeout
        try:
            low, high = retrying(
                f"the offsets of {tp[0]}/{tp[1]}",
                lambda: self.consumer.get_watermark_offsets(
                    KafkaPartition(*tp), timeout=self.timeout, cached=False
                ),
                patience,
            )
        except KafkaException as e:
            error = e.args[0] if e.args else e
            transient = isinstance(error, KafkaError) and is_transient(error)
            waited = f"for {patience:.0f}s " if transient else ""
            raise SourceConnectionError(
                f"the Kafka brokers did not give the offsets of {tp[0]}/{tp[1]} {waited}({error})"
            ) from None
        return int(low), int(high)

    def discover(self) -> None:
        """Register partitions not seen before (driver, once per trigger).

        Raises
        ------
        ConfigError
            When the transaction topic has more than one partition.
        """
        options = self.options
        wanted_txn = () if self.transaction_topic is None else (self.transaction_topic,)
        patience = options.poll_timeout
        topics = partitions_of(
            self.consumer,
            options.subscribe,
            options.subscribe_pattern,
            wanted_txn,
            self.timeout,
            patience,
        )
        if self.transaction_topic is None and options.transaction_topic is None:
            everything = partitions_of(
                self.consumer, (), ".*", timeout=self.timeout, patience=patience
            )
            found = transaction_topic_for(sorted(topics), sorted(everything))
            if found is not None:
                self.transaction_topic = found
                topics[found] = everything[found]
        if self.transaction_topic and topics.get(self.transaction_topic, 1) > 1:
            raise ConfigError(
                f"Debezium's transaction topic {self.transaction_topic!r} has "
                f"{topics[self.transaction_topic]} partitions: its order is the transactions' "
                f"commit order only in one partition. Create it with one partition (Kafka "
                f"Connect: a topic.creation group for it with partitions=1)"
            )
        self._check_deleted(topics)
        known = set(self.partitions)
        for topic, count in topics.items():
            for partition in range(count):
                tp = (topic, partition)
                if tp in known:
                    continue
                start = self.base.position(topic, partition)
                if start is None:
                    start = self.watermarks(tp)[0]  # a partition new to the query: its start
                self.assembler.add_partition(f"{topic}/{partition}", start)
                self.partitions.append(tp)
                self.starts.append(start)
                self.next.append(start)

    def _check_deleted(self, topics: Mapping[str, int]) -> None:
        """Partitions read before whose topic is gone now (deleted, or no longer matching).

        A topic missing from one metadata answer is asked for by name before it counts as
        deleted, so a broker that is restarting is never taken for a deleted topic.
        """
        missing = sorted(
            {
                t
                for i, (t, _) in enumerate(self.partitions)
                if t not in topics and i not in self.gone
            }
        )
        for topic in missing:
            asked = partitions_of(
                self.consumer, (topic,), None, timeout=self.timeout, patience=self.timeout
            )
            if topic in asked:
                continue
            indexes = [i for i, (t, _) in enumerate(self.partitions) if t == topic]
            read_to = ", ".join(f"{self.partitions[i][1]}: {self.next[i]}" for i in indexes)
            what = (
                f"the topic {topic!r} was deleted, or no longer matches the subscription, after "
                f"the query read it up to offsets {{{read_to}}}"
            )
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    f"{what}: records it held after those offsets were never read, and changes "
                    f"of units not delivered yet are gone. Restore from a savepoint, or set "
                    f"failOnDataLoss=false to go on without it (its units not delivered yet "
                    f"are then incomplete and held back)"
                )
            _log.warning("%s: no longer read (failOnDataLoss=false)", what)
            self.gone.update(indexes)

    def advance(self, units: int, end: KafkaOffset) -> None:
        """A batch delivered the first ``units`` planned units and ends at ``end`` (driver)."""
        known = zip(self.partitions, self.starts, strict=True)
        ends = [end.positions.get(tp, start) for tp, start in known]
        self.assembler.advance(units, ends)
        self.starts = ends
        self.base = end

    # -- reading --------------------------------------------------------------------------

    def _check_retained(self, index: int, low: int) -> None:
        """Records the query still needs were deleted (retention, a recreated topic)."""
        start = self.next[index]
        if start >= low:
            return
        topic, partition = self.partitions[index]
        what = (
            f"offsets {start} to {low - 1} of {topic}/{partition} are no longer in Kafka "
            f"(retention deleted them, or the topic was deleted and created again)"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{what}: the query has not read them yet, so their changes would be lost. "
                f"Restore from a savepoint taken before, or set failOnDataLoss=false to skip "
                f"them (their transactions are then incomplete and held back)"
            )
        _log.warning("%s: skipped (failOnDataLoss=false)", what)
        self.lost += low - start
        self.assembler.feed(index, [], [], low)
        self.next[index] = low

    def behind(self) -> int:
        """Offsets between where the next batch starts and the partitions' ends, summed.

        As of the last scan (driver, per trigger; no request): what Kafka's own consumer lag
        would show for the query.
        """
        return sum(
            max(0, high - self.starts[index])
            for index, high in self.latest.items()
            if index < len(self.starts) and index not in self.gone
        )

    def scan(self, stop: Mapping[TopicPartition, int] | None = None) -> None:
        """Read every partition up to this trigger's target (driver, once per trigger).

        ``stop`` caps the target (``Trigger.availableNow``'s end, fixed when the run started).

        Raises
        ------
        SourceConnectionError
            When reading makes no progress for :data:`READ_STALL_S` seconds.
        DataLossError
            Records not read yet were deleted (``failOnDataLoss=true``).
        """
        from confluent_kafka import TopicPartition as KafkaPartition

        self.discover()
        ends: list[int] = []
        for index, tp in enumerate(self.partitions):
            if index in self.gone:
                ends.append(self.next[index])
                continue
            low, high = self.watermarks(tp)
            if high < self.next[index]:
                raise DataLossError(
                    f"the offsets of {tp[0]}/{tp[1]} went back: the query read it up to offset "
                    f"{self.next[index]}, and it ends at {high} now. The topic was deleted and "
                    f"created again (or lost records its leader had acknowledged): the query's "
                    f"offsets name records of a topic that no longer exists, whatever "
                    f"failOnDataLoss says. Start the query on a new checkpoint (startingOffsets "
                    f"for where to begin), or restore a savepoint taken of the new topic"
                )
            self._check_retained(index, low)
            self.latest[index] = high
            if stop is not None:
                high = min(high, stop.get(tp, self.next[index]))
            ends.append(max(high, self.next[index]))
        self.assembler.set_target(ends, round(time.time() * 1000))
        pending = {i for i, end in enumerate(ends) if self.next[i] < end}
        if not pending:
            return
        where = {tp: i for i, tp in enumerate(self.partitions)}
        self._warned_read = False
        self.consumer.assign(
            [KafkaPartition(*self.partitions[i], self.next[i]) for i in sorted(pending)]
        )
        progressed = time.monotonic()
        stall = self.options.poll_timeout
        try:
            while pending:
                messages = self.consumer.consume(num_messages=_BLOCK, timeout=_WAIT_S)
                fed, out_of_range = self._feed(messages, where, ends)
                if out_of_range:
                    # Deleted (retention) between the watermarks and the fetch: as above.
                    for index in out_of_range:
                        self._check_retained(index, self.watermarks(self.partitions[index])[0])
                    self.consumer.assign(
                        [KafkaPartition(*self.partitions[i], self.next[i]) for i in sorted(pending)]
                    )
                if fed or out_of_range:
                    progressed = time.monotonic()
                else:
                    self._skip_control_records(pending, ends)
                pending = {i for i in pending if self.next[i] < ends[i]}
                stalled = time.monotonic() - progressed
                if pending and stalled > STALL_WARNING_S and not self._warned_read:
                    self._warned_read = True
                    _log.warning(
                        "reading %s from the Kafka brokers has made no progress for %.0fs (the "
                        "brokers unreachable?): waiting for up to %.0fs "
                        "(kafkaConsumer.pollTimeoutMs)",
                        ", ".join(f"{t}/{p}" for t, p in (self.partitions[i] for i in pending)),
                        stalled,
                        stall,
                    )
                if pending and stalled > stall:
                    names = ", ".join(f"{t}/{p}" for t, p in (self.partitions[i] for i in pending))
                    raise SourceConnectionError(
                        f"reading {names} from the Kafka brokers made no progress for "
                        f"{stall:.0f}s (kafkaConsumer.pollTimeoutMs): the brokers are "
                        f"unreachable or the partitions' leaders are unavailable"
                    )
        finally:
            self.consumer.unassign()

    def _feed(
        self, messages: Sequence[Message], where: Mapping[TopicPartition, int], ends: list[int]
    ) -> tuple[int, set[int]]:
        """Feed consumed messages to the assembler (natively: it reads the ``Message`` objects).

        Returns how many records were fed, and the partitions whose position Kafka no longer
        holds (deleted since the watermarks were read).
        """
        from confluent_kafka import KafkaError

        fed, failed, nexts = self.assembler.feed_messages(messages, ends, round(time.time() * 1000))
        for index, next_offset in nexts:
            self.next[index] = next_offset
        out_of_range: set[int] = set()
        for position in failed:
            message = messages[position]
            error = message.error()
            if error is None or error.code() == KafkaError._PARTITION_EOF:
                continue
            place = (message.topic(), message.partition())
            if is_out_of_range(error) and place in where:
                out_of_range.add(where[place])  # type: ignore[index]
                continue
            if is_transient(error) and not error.fatal():
                # A broker down or restarting, a leader moving: librdkafka reconnects and
                # fetches again by itself; the stall bound (pollTimeoutMs) decides.
                self._transient(error)
                continue
            raise SourceConnectionError(f"reading from Kafka failed: {error.str()}")
        return fed, out_of_range

    def _transient(self, error: KafkaError) -> None:
        """Warn once per trigger that reading meets a transient error (its name)."""
        if self._warned_read:
            return
        self._warned_read = True
        _log.warning(
            "reading from the Kafka brokers: %s; the client reconnects and reads on, for up to "
            "%.0fs without progress (kafkaConsumer.pollTimeoutMs)",
            error.str(),
            self.options.poll_timeout,
        )

    def _skip_control_records(self, pending: set[int], ends: list[int]) -> None:
        """Move past offsets that hold no record for the application.

        Transaction markers (commit and abort records, KIP-98) and the records of aborted
        transactions take offsets a ``read_committed`` consumer never returns; its position
        moves past them.
        """
        from confluent_kafka import TopicPartition as KafkaPartition

        positions = self.consumer.position(
            [KafkaPartition(*self.partitions[i]) for i in sorted(pending)]
        )
        for position in positions:
            index = self.partitions.index((position.topic, position.partition))
            moved = min(int(position.offset), ends[index])
            if moved > self.next[index]:
                self.assembler.feed(index, [], [], moved)
                self.next[index] = moved
