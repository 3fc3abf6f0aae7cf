"""The connector's Kafka client: confluent-kafka's ``Consumer``, as the driver and executors use it.

confluent-kafka (librdkafka, maintained by Confluent, wheels for every platform Spark runs on)
reads what the Java client reads, including transactional topics under ``read_committed``, and
decodes nothing: records arrive as bytes for the Debezium decoder. The pure-Python clients
(kafka-python, aiokafka) read several times slower per record and would put Python on the
per-record path this connector keeps native.

The source never joins a consumer group: partitions are ``assign``-ed and offsets live in Spark's
checkpoint, never committed to Kafka. librdkafka still wants a ``group.id``; unless the user sets
``kafka.group.id``, a throwaway one is used.

confluent-kafka is the ``kafka`` extra: :func:`require_client` imports it, and without it raises
:class:`~spark_ckpt.errors.MissingExtraError` naming the extra to install (the connector's
builder calls it on the driver at query start, :func:`new_consumer` on executors). librdkafka's
own log lines (``%3|...|FAIL|...`` while a broker is down) go to the Python logger
:data:`LIBRDKAFKA_LOGGER`, not to stderr, so the application's logging decides what is shown.

Runs on the driver (planning, once per trigger) and on executors (reading, once per task).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

from spark_ckpt.errors import InvalidOptionError, MissingExtraError, SourceConnectionError

from .client_config import PREFIX, masked

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError

__all__ = [
    "LIBRDKAFKA_LOGGER",
    "METADATA_TIMEOUT_S",
    "STALL_WARNING_S",
    "ClientLog",
    "is_out_of_range",
    "new_consumer",
    "partitions_of",
    "require_client",
    "retrying",
    "transaction_topic_for",
]

_log = logging.getLogger(__name__)

T = TypeVar("T")

LIBRDKAFKA_LOGGER = "spark_ckpt.sources.kafka.librdkafka"
"""The Python logger librdkafka's log lines go to (its syslog levels mapped by confluent-kafka:
3 ERROR, 4 WARNING, 5-6 INFO, 7 DEBUG; a client's repeated connection failures INFO,
:class:`ClientLog`). They are forwarded while the client consumes (in ``consume()`` calls),
never from librdkafka's own threads."""

STALL_WARNING_S = 10.0
"""Reading that made no progress this long logs a warning (once per read) while it waits on."""

METADATA_TIMEOUT_S = 30.0
"""How long a metadata or watermark request may take before the broker counts as unreachable."""

_PROPERTY = re.compile(r'property "([^"]+)"')


class ClientLog:
    """One client's librdkafka log lines, to the logger :data:`LIBRDKAFKA_LOGGER`.

    What confluent-kafka's ``logger`` setting is given: it calls ``log(level, "%s [%s] %s",
    facility, client name, text)`` with librdkafka's syslog level mapped to Python's. A broker
    connection failure (facility ``FAIL``) keeps its level the first time, so its reason (refused,
    a TLS handshake, SASL) shows; the same client's later ones, one per broker per reconnect
    attempt while a broker is down, are ``INFO``: the connector reports an outage itself, as a
    warning while it waits and a ``SourceConnectionError`` past ``kafkaConsumer.pollTimeoutMs``.
    Spark's Python workers run with Python's default logging (``WARNING`` and above to stderr),
    where every ``FAIL`` line at ``ERROR`` was the flood this replaces.
    """

    def __init__(self) -> None:
        self.logger = logging.getLogger(LIBRDKAFKA_LOGGER)
        self.failed = False

    def log(self, level: int, message: str, *args: object) -> None:
        """Log one line (librdkafka's thread has handed it over in ``consume()``)."""
        if args and args[0] == "FAIL":
            if self.failed:
                level = min(level, logging.INFO)
            self.failed = True
        self.logger.log(level, message, *args)


def require_client() -> ModuleType:
    """The ``confluent_kafka`` module, the Kafka client the ``kafka`` extra installs.

    Raises
    ------
    MissingExtraError
        When it is not installed here: the message says ``pip install 'spark-ckpt[kafka]'``.
    """
    try:
        import confluent_kafka
    except ImportError as e:
        if e.name not in (None, "confluent_kafka") and not str(e.name).startswith(
            "confluent_kafka."
        ):
            raise  # confluent-kafka is there, but something it imports is broken
        raise MissingExtraError("kafka", "confluent_kafka", "the kafka connector") from None
    return confluent_kafka


def new_consumer(settings: Mapping[str, str], purpose: str) -> Consumer:
    """A consumer with the user's settings, never committing offsets.

    Raises
    ------
    InvalidOptionError
        For a setting librdkafka does not accept, named as the option ``kafka.<setting>``
        (a secret's value is never shown).
    MissingExtraError
        Without the ``kafka`` extra (confluent-kafka) installed here.
    """
    client = require_client()

    config: dict[str, object] = dict(settings)
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
    # librdkafka prints its log lines to stderr (a %3|FAIL line per broker per attempt while a
    # broker is down); through this logger the application's logging level decides.
    config["logger"] = ClientLog()
    try:
        consumer: Consumer = client.Consumer(config)
        return consumer
    except (client.KafkaException, ValueError, TypeError) as e:
        text = str(e)
        found = _PROPERTY.search(text)
        key = found.group(1) if found else "bootstrap.servers"
        given = str(config.get(key, ""))
        shown = masked({key: given})[key]
        reason = text if shown == given else "librdkafka refused it"
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


def retrying(what: str, call: Callable[[], T], patience: float) -> T:
    """``call()``, its transient errors (:func:`is_transient`) retried for up to ``patience`` s.

    While a broker restarts or a partition's leader moves, librdkafka answers requests with
    errors that pass once the cluster settles, some at once (``NOT_LEADER_FOR_PARTITION``,
    ``_UNKNOWN_PARTITION``), some after the request's own timeout (``_TRANSPORT``). They are
    retried with a growing pause (0.2 s to 5 s) and one warning naming ``what`` and the error,
    so the outage is visible in the driver's log; a broker back within the bound costs only the
    wait. Driver.

    Raises
    ------
    KafkaException
        The last error: not transient (an authorization error, a bad setting), or still there
        after ``patience`` seconds. The caller names what failed.
    """
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + patience
    pause, warned = 0.2, False
    while True:
        try:
            return call()
        except KafkaException as e:
            error = e.args[0] if e.args else e
            transient = isinstance(error, KafkaError) and is_transient(error)
            if not transient or time.monotonic() + pause > deadline:
                raise
            if not warned:
                _log.warning(
                    "%s: the Kafka brokers answered %s: retrying for up to %.0fs "
                    "(kafkaConsumer.pollTimeoutMs)",
                    what,
                    error,
                    patience,
                )
                warned = True
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


def partitions_of(
    consumer: Consumer,
    subscribe: Sequence[str],
    pattern: str | None,
    extra: Sequence[str] = (),
    timeout: float = METADATA_TIMEOUT_S,
    patience: float = 0.0,
) -> dict[str, int]:
    """The topics to read, with their partition counts (driver, once per trigger).

    ``subscribe`` names topics (a missing one has no partitions yet); ``pattern`` matches whole
    topic names; ``extra`` (the transaction topic) is added when it exists. Kafka's internal
    topics (``__consumer_offsets``, ...) never match. A request waits up to ``timeout``
    seconds; transient errors (a broker restarting) are retried for up to ``patience`` seconds
    (:func:`retrying`).

    Raises
    ------
    SourceConnectionError
        When the brokers do not answer within that bound.
    """
    from confluent_kafka import KafkaException

    try:
        metadata = retrying(
            "a metadata request", lambda: consumer.list_topics(timeout=timeout), patience
        )
    except KafkaException as e:
        waited = max(timeout, patience)
        raise SourceConnectionError(
            f"the Kafka brokers did not answer a metadata request within "
            f"{waited:.0f}s ({e.args[0] if e.args else e}): check "
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
