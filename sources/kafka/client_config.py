"""The Kafka client settings a query passes as ``kafka.*`` options, checked and made safe to show.

The connector's client is confluent-kafka (librdkafka), while the settings users know come from
Spark's Kafka source, which runs the Java client. Most names are the same in both (``bootstrap
.servers``, ``security.protocol``, ``sasl.mechanism``, ``client.id``, ...). This module:

- refuses the settings Spark's Kafka source refuses too, because the source manages them itself
  (``auto.offset.reset``, ``enable.auto.commit``, deserializers, interceptors: Spark's
  "Kafka Specific Configurations" lists them), each with what to use instead;
- translates ``sasl.jaas.config`` for the PLAIN and SCRAM login modules (the way Java clients
  carry a user name and password) into librdkafka's ``sasl.username`` / ``sasl.password``;
- refuses other Java-only settings (key stores in JKS form, ``sasl.jaas.config`` for other login
  modules) with librdkafka's equivalent named (librdkafka's CONFIGURATION.md);
- sets ``isolation.level=read_committed`` unless the user sets it: records of aborted Kafka
  transactions (an exactly-once producer's, KIP-98; Kafka Connect's exactly-once source
  support, KIP-618) are never read, and for other producers it changes nothing;
- renders settings for messages and progress with every secret masked.

Pure Python; runs on the driver (once per query start) and on executors (per task).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from spark_ckpt.errors import InvalidOptionError

__all__ = ["PREFIX", "client_settings", "masked"]

PREFIX = "kafka."
"""Options ``kafka.<setting>`` are client settings (Spark's Kafka source's convention)."""

_MANAGED = {
    "auto.offset.reset": "the source chooses where to read: set startingOffsets instead",
    "enable.auto.commit": "offsets live in Spark's checkpoint; the source never commits any",
    "key.deserializer": "records are read as bytes and decoded by the source",
    "value.deserializer": "records are read as bytes and decoded by the source",
    "interceptor.classes": "the source reads records itself; Java interceptors cannot run here",
    "enable.partition.eof": "the source tells where each partition ends itself",
}
"""Settings the source manages, as Spark's Kafka source refuses them."""

_JAVA_ONLY = {
    "ssl.truststore.location": "ssl.ca.location (a PEM file of the CA certificates)",
    "ssl.truststore.password": "ssl.ca.location (a PEM file needs no password)",
    "ssl.truststore.type": "ssl.ca.location (PEM)",
    "ssl.keystore.location": (
        "ssl.certificate.location and ssl.key.location (PEM), or ssl.keystore.location with a "
        "PKCS#12 file (.p12)"
    ),
    "ssl.keystore.type": "PEM files (ssl.certificate.location, ssl.key.location) or PKCS#12",
    "ssl.endpoint.identification.algorithm": "ssl.endpoint.identification.algorithm=https|none",
    "sasl.login.callback.handler.class": "sasl.oauthbearer.* settings",
    "sasl.client.callback.handler.class": "sasl.oauthbearer.* settings",
    "ssl.engine.factory.class": "the ssl.* settings of librdkafka",
}
"""Java client settings librdkafka does not read, with its equivalent (CONFIGURATION.md)."""

_SECRET = re.compile(r"password|secret|jaas|token|credential|(^|\.)key($|\.)", re.IGNORECASE)

_JAAS = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+required\b(?P<options>.*?);?\s*$", re.DOTALL | re.IGNORECASE
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
}

DEFAULTS = {"isolation.level": "read_committed"}
"""What the source sets unless the user does (see the module docstring)."""


def masked(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with the value of every secret-looking key replaced by ``"***"``."""
    return {k: "***" if _SECRET.search(k) else v for k, v in settings.items()}


def _option(key: str) -> str:
    return PREFIX + key


def _translate_jaas(value: str) -> dict[str, str]:
    """``sasl.jaas.config`` of a PLAIN or SCRAM login module as librdkafka settings."""
    found = _JAAS.match(value)
    module = found.group("module") if found else ""
    if module not in _JAAS_MODULES:
        raise InvalidOptionError(
            _option("sasl.jaas.config"),
            "***",
            "a PlainLoginModule or ScramLoginModule entry (username=... password=...); for "
            "other mechanisms set librdkafka's own settings (sasl.oauthbearer.*, "
            "sasl.kerberos.*) as kafka.<setting>",
        )
    assert found is not None
    pairs = dict(_JAAS_OPTION.findall(found.group("options")))
    if "username" not in pairs or "password" not in pairs:
        raise InvalidOptionError(
            _option("sasl.jaas.config"),
            "***",
            'both username="..." and password="..." in the login module entry',
        )
    return {"sasl.username": pairs["username"], "sasl.password": pairs["password"]}


def client_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The librdkafka settings of a query's ``kafka.*`` options (prefix removed).

    Runs on the driver, once per query start; the result travels to executors.

    Raises
    ------
    InvalidOptionError
        For a setting the source manages, a Java-only one, a ``sasl.jaas.config`` it cannot
        translate, or a missing ``kafka.bootstrap.servers``. Secret values never appear in it.
    """
    settings: dict[str, str] = {}
    for key, value in options.items():
        if key in _MANAGED:
            raise InvalidOptionError(_option(key), value, f"no value: {_MANAGED[key]}")
        if key in _JAVA_ONLY:
            shown = "***" if _SECRET.search(key) else value
            raise InvalidOptionError(
                _option(key),
                shown,
                f"a librdkafka setting: this is a Java client setting; use {_JAVA_ONLY[key]}",
            )
        if key == "sasl.jaas.config":
            settings.update(_translate_jaas(value))
            continue
        settings[key] = value
    if not settings.get("bootstrap.servers", "").strip():
        raise InvalidOptionError(
            _option("bootstrap.servers"),
            settings.get("bootstrap.servers"),
            "the brokers to contact, host:port separated by commas "
            "(.option('kafka.bootstrap.servers', 'broker1:9092'))",
        )
    return {**DEFAULTS, **settings}
