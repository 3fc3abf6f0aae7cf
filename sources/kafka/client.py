"""The connector's Kafka client: confluent-kafka's ``Consumer``, as the driver and executors use it.

confluent-kafka (librdkafka, maintained by Confluent, wheels for every platform Spark runs on)
reads what the Java client reads, including transactional topics under ``read_committed``, and
decodes nothing: records arrive as bytes for the Debezium decoder. The pure-Python clients
(kafka-python, aiokafka) read several times slower per record and would put Python on the
per-record path this connector keeps native.

The source never joins a consumer group: partitions are ``assign``-ed and offsets live in Spark's
checkpoint, never committed to Kafka. librdkafka still wants a ``group.id``; unless the user sets
``kafka.group.id``, a throwaway one is used.

Runs on the driver (planning, once per trigger) and on executors (reading, once per task).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from spark_ckpt.errors import InvalidOptionError, SourceConnectionError

from .client_config import PREFIX, masked

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError

__all__ = [
    "METADATA_TIMEOUT_S",
    "is_out_of_range",
    "new_consumer",
    "partitions_of",
    "transaction_topic_for",
]

METADATA_TIMEOUT_S = 30.0
"""How long a metadata or watermark request may take before the broker counts as unreachable."""

_PROPERTY = re.compile(r'property "([^"]+)"')


def new_consumer(settings: Mapping[str, str], purpose: str) -> Consumer:
    """A consumer with the user's settings, never committing offsets.

    Raises
    ------
    InvalidOptionError
        For a setting librdkafka does not accept, named as the option ``kafka.<setting>``
        (a secret's value is never shown).
    """
    from confluent_kafka import Consumer, KafkaException

    config = dict(settings)
    config.setdefault("group.id", f"spark-ckpt-{purpose}-{uuid.uuid4().hex[:12]}")
    config.setdefault("client.id", f"spark-ckpt-{purpose}")
    config["enable.auto.commit"] = "false"
    config["enable.auto.offset.store"] = "false"
    # An assigned offset the brokers no longer hold is an error the reader sees
    # (ERR__AUTO_OFFSET_RESET), never a silent jump to the partition's end (librdkafka's
    # default, "largest"): the source decides what lost records mean (failOnDataLoss).
    config["auto.offset.reset"] = "error"
    # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1000 ms) whenever its
    # prefetch queue is over queued.max.messages.kbytes (64 MB: about 32,000 records of 2 KB,
    # the size of Debezium's records with the schema envelope). Reading a backlog outruns
    # decoding, so every partition stalled a second at a time: reading the benchmark's 139,000
    # records took 1.55 s instead of 0.65 s with 10 ms (librdkafka's CONFIGURATION.md).
    config.setdefault("fetch.queue.backoff.ms", "10")
    try:
        return Consumer(config)
    except (KafkaException, ValueError, TypeError) as e:
        text = str(e)
        found = _PROPERTY.search(text)
        key = found.group(1) if found else "bootstrap.servers"
        shown = masked({key: config.get(key, "")})[key]
        reason = text if shown == config.get(key, "") else "librdkafka refused it"
        raise InvalidOptionError(
            PREFIX + key, shown, f"a setting librdkafka (confluent-kafka) accepts: {reason}"
        ) from None


def is_out_of_range(error: KafkaError) -> bool:
    """Whether a consume error says the brokers no longer hold the position being read.

    librdkafka reports it as ``ERR__AUTO_OFFSET_RESET`` under ``auto.offset.reset=error`` (set by
    :func:`new_consumer`), or passes the broker's ``OFFSET_OUT_OF_RANGE`` on.
    """
    from confluent_kafka import KafkaError

    return error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)


def is_transient(error: KafkaError) -> bool:
    """Whether an offset or metadata error passes when the cluster settles: retry it.

    Seen while a broker restarts or a partition's leadership moves: the broker is not the
    leader (``NOT_LEADER_FOR_PARTITION``), there is none yet (``LEADER_NOT_AVAILABLE``), the
    client's metadata does not know the partition for now (``_UNKNOWN_PARTITION``), the
    connection is down (``_TRANSPORT``, ``_ALL_BROKERS_DOWN``) or the request timed out; and
    whatever librdkafka marks retriable. Authorization and configuration errors are not.
    """
    from confluent_kafka import KafkaError

    transient = (
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError.REQUEST_TIMED_OUT,
    )
    return bool(error.retriable()) or error.code() in transient


def partitions_of(
    consumer: Consumer,
    subscribe: Sequence[str],
    pattern: str | None,
    extra: Sequence[str] = (),
    timeout: float = METADATA_TIMEOUT_S,
) -> dict[str, int]:
    """The topics to read, with their partition counts (driver, once per trigger).

    ``subscribe`` names topics (a missing one has no partitions yet); ``pattern`` matches whole
    topic names; ``extra`` (the transaction topic) is added when it exists. Kafka's internal
    topics (``__consumer_offsets``, ...) never match.

    Raises
    ------
    SourceConnectionError
        When the brokers do not answer within ``timeout`` seconds.
    """
    from confluent_kafka import KafkaException

    try:
        metadata = consumer.list_topics(timeout=timeout)
    except KafkaException as e:
        raise SourceConnectionError(
            f"the Kafka brokers did not answer a metadata request within "
            f"{timeout:.0f}s ({e.args[0] if e.args else e}): check "
            f"kafka.bootstrap.servers and that the brokers run"
        ) from None
    existing = {name: len(meta.partitions) for name, meta in metadata.topics.items()}
    wanted = set(subscribe) | set(extra)
    if pattern is not None:
        matcher = re.compile(pattern)
        wanted |= {t for t in existing if matcher.fullmatch(t) and not t.startswith("__")}
    return {t: existing[t] for t in sorted(wanted) if existing.get(t)}


def transaction_topic_for(topics: Sequence[str], existing: Sequence[str]) -> str | None:
    """Debezium's transaction topic for ``topics``: ``<topic.prefix>.transaction``.

    Debezium names every topic ``<topic.prefix>.<...>``; the prefix may itself contain dots, so
    each leading part of a data topic's name is tried, the longest first, against the topics
    that exist. None when none exists (yet).
    """
    present = set(existing)
    for topic in topics:
        parts = topic.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            candidate = ".".join(parts[:cut]) + ".transaction"
            if candidate in present and candidate != topic:
                return candidate
    return None
