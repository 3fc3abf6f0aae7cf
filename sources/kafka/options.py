"""The ``kafka`` connector's own options, named and read as Spark's Kafka source reads them.

Spark's Kafka source ("Structured Streaming + Kafka Integration Guide") names what users know:
``kafka.<setting>`` client settings, ``subscribe`` / ``subscribePattern``, ``startingOffsets``,
``failOnDataLoss``, ``minPartitions``. This connector reads them the same way, with two
differences a change-data reader needs, each documented in docs/connectors/kafka.md:

- ``startingOffsets`` defaults to ``earliest``, not ``latest``: a Debezium topic starts with the
  snapshot, and a mirror started after it would apply updates to rows it never saw;
- ``transactionTopic`` names Debezium's transaction metadata topic (``<topic.prefix>
  .transaction``, found among the topics when unset); ``none`` reads without it, each change
  its own unit.

Pure Python; runs on the driver once per query start.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from spark_ckpt.errors import ConfigError, InvalidOptionError
from spark_ckpt.model.option_types import Boolean, Duration, Names, Parsed, PositiveInt
from spark_ckpt.model.options import OptionReader, OptionSpec, declared, read_declared

from ..options import ConnectorOptions
from .client_config import PREFIX, client_settings

__all__ = [
    "EARLIEST",
    "LATEST",
    "POLL_TIMEOUT_MS",
    "SNAPSHOT_SETTLE_S",
    "KafkaOptions",
    "parse_starting_offsets",
]

EARLIEST = -2
"""In a ``startingOffsets`` JSON: the partition's first offset (Spark's convention)."""
LATEST = -1
"""In a ``startingOffsets`` JSON: the partition's end."""

SNAPSHOT_SETTLE_S = 2.0
"""``snapshotSettle``'s default. Kafka's producer sends one batch per partition per request, so a
record sent before a snapshot's last one can become visible after it in another partition; a
transaction is complete by its END's counts, a snapshot or chunk only by waiting. Kafka Connect
sends a batch within milliseconds when the broker is healthy; 2 s leaves a wide margin and costs
one trigger's delay once per snapshot or chunk. A record later still fails the query with
``LateRecordError`` rather than being delivered apart from its unit."""

POLL_TIMEOUT_MS = 120_000
"""``kafkaConsumer.pollTimeoutMs``'s default: Spark's Kafka source's (``spark.network.timeout``).
Reading (on the driver for planning, on executors for a batch) that makes no progress for this
long fails with ``SourceConnectionError``; metadata and offset requests wait at most 30 s, or this
when it is shorter. librdkafka retries and reconnects within it, so a broker back in time costs
only the wait."""

StartingOffsets = Literal["earliest", "latest"] | dict[str, dict[int, int]]

_OFFSETS_FORM = (
    "earliest, latest, or JSON per topic and partition as Spark's Kafka source takes it: "
    '{"dbz.public.orders": {"0": 23, "1": -2}} (-2: earliest, -1: latest)'
)


def parse_starting_offsets(value: str | None) -> StartingOffsets:
    """Read ``startingOffsets`` (default ``earliest``).

    Raises
    ------
    InvalidOptionError
        For anything but ``earliest``, ``latest`` or that JSON form.
    """
    if value is None:
        return "earliest"
    try:
        return _starting_offsets(value)
    except ValueError as e:
        raise InvalidOptionError("startingOffsets", value, _OFFSETS_FORM) from e


def _starting_offsets(value: str) -> StartingOffsets:
    if value.strip().lower() in ("earliest", ""):
        return "earliest"
    if value.strip().lower() == "latest":
        return "latest"
    try:
        parsed: Any = json.loads(value)
        out: dict[str, dict[int, int]] = {}
        for topic, partitions in parsed.items():
            out[str(topic)] = {int(p): int(o) for p, o in partitions.items()}
            if any(p < 0 for p in out[str(topic)]) or any(
                o < EARLIEST for o in out[topic].values()
            ):
                raise ValueError("negative partition or offset below -2")
    except (ValueError, TypeError, AttributeError) as e:
        raise ValueError(value) from e
    if not out:
        raise ValueError(value)
    return out


def _pattern(value: str) -> str:
    try:
        re.compile(value.strip())
    except re.error as e:
        raise InvalidOptionError("subscribePattern", value, f"a regular expression ({e})") from e
    return value.strip()


def _transaction_topic(value: str) -> str:
    return "" if value.strip().lower() == "none" else value.strip()


def _milliseconds(value: str) -> float:
    return PositiveInt().parse(value) / 1000


CLIENT: OptionSpec[str] = OptionSpec(
    PREFIX,
    "a Kafka client setting, passed to librdkafka (confluent-kafka); `kafka.bootstrap.servers` "
    "is required. As with Spark's Kafka source, settings the source manages are refused "
    "(`auto.offset.reset`: use `startingOffsets`; `enable.auto.commit`, deserializers, "
    "interceptors). Java-only settings are refused with librdkafka's equivalent named "
    "(`ssl.truststore.location`: `ssl.ca.location`, a PEM file); `sasl.jaas.config` for PLAIN "
    "and SCRAM becomes `sasl.username`/`sasl.password`. Secret values never reach errors or "
    "progress",
    placeholder="setting",
)
SUBSCRIBE: OptionSpec[tuple[str, ...]] = OptionSpec(
    "subscribe",
    "topic names separated by commas; exactly one of `subscribe` and `subscribePattern` is "
    "required. Partitions added later are read from their start",
    Names("topic names"),
    default=(),
    default_note="one of the two required",
)
SUBSCRIBE_PATTERN: OptionSpec[str] = OptionSpec(
    "subscribePattern",
    "a regular expression matching whole topic names; topics that match later are read from "
    "their start",
    Parsed(_pattern, "a regular expression"),
    default_note="one of the two required",
)
STARTING_OFFSETS: OptionSpec[StartingOffsets] = OptionSpec(
    "startingOffsets",
    "`earliest`, `latest`, or JSON per topic and partition as Spark takes it "
    '(`{"dbz.public.orders": {"0": 23}}`, `-2` earliest, `-1` latest). **Unlike Spark\'s '
    "Kafka source, the default is `earliest`**: a Debezium topic starts with the snapshot, and "
    "a table mirrored from `latest` would be missing every row not changed since",
    Parsed(_starting_offsets, _OFFSETS_FORM, blank_is_unset=False),
    default="earliest",
)
FAIL_ON_DATA_LOSS: OptionSpec[bool] = OptionSpec(
    "failOnDataLoss",
    "records the query has not read were deleted (retention), or a topic it read was deleted: "
    "`DataLossError` naming topic, partition and offsets; `false` skips them with a warning and "
    "a counter (`status.skipped.lost`, `status.deletedTopics`). A transaction missing a change "
    "is then held back by its END's count; the snapshot and incremental chunks carry no count "
    "and are delivered without the lost rows. A topic created again (its offsets went back) "
    "fails the query either way",
    Boolean(),
    default=True,
)
POLL_TIMEOUT: OptionSpec[float] = OptionSpec(
    "kafkaConsumer.pollTimeoutMs",
    "as in Spark's Kafka source: reading (planning on the driver, a batch's range on an "
    "executor) that makes no progress this long fails with `SourceConnectionError` naming the "
    "partitions; metadata requests wait at most 30 s, or this when shorter, and their transient "
    "errors (a broker restarting, a leader moving) are retried within it. The client "
    "reconnects within it, so a broker back in time costs only the wait",
    Parsed(
        _milliseconds,
        "a positive integer (milliseconds)",
        lambda seconds: str(round(seconds * 1000)),
        blank_is_unset=False,
    ),
    default=POLL_TIMEOUT_MS / 1000,
)
TRANSACTION_TOPIC: OptionSpec[str] = OptionSpec(
    "transactionTopic",
    "Debezium's transaction topic, found beside the data topics when unset (the longest prefix "
    "of a data topic's name with `.transaction` that exists); it must have one partition. "
    "`none`: read without one, each streamed change its own unit (the `transaction` block of "
    "Debezium's records ignored), the initial snapshot one unit",
    Parsed(_transaction_topic, "a topic name, or none"),
    default_note="`<prefix>.transaction`",
)
SNAPSHOT_SETTLE: OptionSpec[float] = OptionSpec(
    "snapshotSettle",
    "how long after the initial snapshot's last record (or an incremental chunk's closing "
    "transaction) was sent the connector waits for records sent before it to show up in other "
    "partitions (Spark durations)",
    Duration(),
    default=SNAPSHOT_SETTLE_S,
)
MIN_PARTITIONS: OptionSpec[int] = OptionSpec(
    "minPartitions",
    "read a batch with at least this many Spark partitions: offset ranges are split in "
    "proportion to their size, as Spark's Kafka source splits them (by default one Spark "
    "partition per Kafka partition with records in the batch)",
    PositiveInt(),
)


@dataclass(frozen=True)
class KafkaOptions(ConnectorOptions):
    """Options of ``connector=kafka``.

    Attributes
    ----------
    client
        The client settings (``kafka.*`` options, prefix removed, translated for librdkafka).
    subscribe
        Topics to read, when given by name.
    subscribe_pattern
        A regular expression topics are matched against (whole name), when given instead;
        topics that start to match later are read from their start.
    starting_offsets
        Where a new query starts.
    fail_on_data_loss
        Fail when records the query still needs were deleted (retention, a recreated topic);
        else skip them with a warning and a counter.
    min_partitions
        The least number of Spark partitions a batch is read with (offset ranges are split).
    transaction_topic
        Debezium's transaction metadata topic; None: find ``<prefix>.transaction`` among the
        topics; ``""``: read without one (option value ``none``).
    snapshot_settle
        Seconds a unit without an event count (the initial snapshot, an incremental chunk)
        waits after its closing record was sent before it is complete (see
        :data:`SNAPSHOT_SETTLE_S`).
    poll_timeout
        Seconds reading may make no progress before the brokers count as unreachable
        (``kafkaConsumer.pollTimeoutMs``, see :data:`POLL_TIMEOUT_MS`).
    """

    OPTIONS: ClassVar[tuple[OptionSpec[Any], ...]] = (
        CLIENT,
        SUBSCRIBE,
        SUBSCRIBE_PATTERN,
        STARTING_OFFSETS,
        FAIL_ON_DATA_LOSS,
        POLL_TIMEOUT,
        TRANSACTION_TOPIC,
        SNAPSHOT_SETTLE,
        MIN_PARTITIONS,
    )

    client: dict[str, str] = field(hash=False, repr=False)  # holds passwords
    subscribe: tuple[str, ...] = declared(SUBSCRIBE)
    subscribe_pattern: str | None = declared(SUBSCRIBE_PATTERN)
    starting_offsets: StartingOffsets = declared(STARTING_OFFSETS)
    fail_on_data_loss: bool = declared(FAIL_ON_DATA_LOSS)
    min_partitions: int | None = declared(MIN_PARTITIONS)
    transaction_topic: str | None = declared(TRANSACTION_TOPIC)
    snapshot_settle: float = declared(SNAPSHOT_SETTLE)
    poll_timeout: float = declared(POLL_TIMEOUT)

    @classmethod
    def parse(cls, options: OptionReader) -> KafkaOptions:
        """Read the options above and the ``kafka.*`` settings (driver, once per query start).

        Raises
        ------
        ConfigError
            Neither or both of ``subscribe`` and ``subscribePattern``.
        InvalidOptionError
            A bad value, a client setting the source manages or cannot pass to librdkafka.
        """
        client = client_settings(options.prefixed(PREFIX))
        parsed = cls(client=client, **read_declared(cls, options))
        if bool(parsed.subscribe) == bool(parsed.subscribe_pattern):
            raise ConfigError(
                "the kafka connector needs exactly one of the options 'subscribe' (topic names, "
                "separated by commas) and 'subscribePattern' (a regular expression), as Spark's "
                "Kafka source does"
            )
        return parsed
