"""The kafka connector's options: Spark's Kafka source's names and rules, librdkafka's settings."""

from __future__ import annotations

import re

import pytest

from spark_ckpt.errors import ConfigError, InvalidOptionError
from spark_ckpt.model.options import OptionReader
from spark_ckpt.sources.kafka.client_config import client_settings, masked
from spark_ckpt.sources.kafka.options import KafkaOptions, parse_starting_offsets


def parse(**options: str) -> KafkaOptions:
    given = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "dbz.public.orders"}
    given.update(options)
    reader = OptionReader(
        {k.lower(): v for k, v in given.items()},
        "txn-cdc",
        KafkaOptions.NAMES,
        prefixes=KafkaOptions.PREFIXES,
    )
    return KafkaOptions.parse(reader)


def test_defaults_read_committed_from_the_earliest_offsets() -> None:
    options = parse()
    assert options.subscribe == ("dbz.public.orders",)
    assert options.starting_offsets == "earliest"
    assert options.fail_on_data_loss
    assert options.client == {
        "isolation.level": "read_committed",
        "bootstrap.servers": "127.0.0.1:9092",
    }
    assert options.transaction_topic is None


def test_the_users_isolation_level_wins() -> None:
    options = parse(**{"kafka.isolation.level": "read_uncommitted"})
    assert options.client["isolation.level"] == "read_uncommitted"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("latest", "latest"),
        (" Earliest ", "earliest"),
        ('{"t": {"0": 23, "1": -2}, "u": {"0": -1}}', {"t": {0: 23, 1: -2}, "u": {0: -1}}),
    ],
)
def test_starting_offsets_as_spark_takes_them(given: str, expected: object) -> None:
    assert parse_starting_offsets(given) == expected


@pytest.mark.parametrize("given", ["newest", "{}", '{"t": {"x": 1}}', '{"t": {"0": -3}}', "[1]"])
def test_bad_starting_offsets_name_the_accepted_forms(given: str) -> None:
    with pytest.raises(InvalidOptionError, match="earliest, latest, or JSON"):
        parse_starting_offsets(given)


def test_exactly_one_of_subscribe_and_subscribe_pattern() -> None:
    with pytest.raises(ConfigError, match="exactly one of"):
        parse(subscribePattern="dbz[.].*")
    with pytest.raises(ConfigError, match="exactly one of"):
        parse(subscribe="")
    options = parse(subscribe="", subscribePattern=r"dbz\..*")
    assert options.subscribe_pattern == r"dbz\..*"
    with pytest.raises(InvalidOptionError, match=r"regular expression \(unterminated"):
        parse(subscribe="", subscribePattern="dbz[")


@pytest.mark.parametrize(
    "key", ["auto.offset.reset", "enable.auto.commit", "value.deserializer", "interceptor.classes"]
)
def test_settings_the_source_manages_are_refused_as_spark_refuses_them(key: str) -> None:
    with pytest.raises(InvalidOptionError, match=re.escape(f"kafka.{key}")):
        parse(**{f"kafka.{key}": "x"})


def test_java_only_settings_name_librdkafkas_equivalent_and_hide_secrets() -> None:
    with pytest.raises(InvalidOptionError, match=r"ssl\.ca\.location") as raised:
        parse(**{"kafka.ssl.truststore.password": "hunter2"})
    assert "hunter2" not in str(raised.value)


def test_plain_and_scram_jaas_configs_become_username_and_password() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="s3cr\\"et";'
    )
    settings = client_settings(
        {
            "bootstrap.servers": "b:9093",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": jaas,
        }
    )
    assert settings["sasl.username"] == "alice"
    assert settings["sasl.password"] == 's3cr\\"et'
    assert "sasl.jaas.config" not in settings
    shown = masked(settings)
    assert shown["sasl.password"] == "***"
    assert shown["bootstrap.servers"] == "b:9093"
    assert "alice" in shown.values()  # a user name is no secret


def test_other_login_modules_are_refused_without_showing_the_config() -> None:
    jaas = 'com.sun.security.auth.module.Krb5LoginModule required keyTab="/k" principal="p";'
    with pytest.raises(InvalidOptionError, match=r"sasl\.oauthbearer") as raised:
        client_settings({"bootstrap.servers": "b:9092", "sasl.jaas.config": jaas})
    assert "Krb5" not in str(raised.value)


def test_bootstrap_servers_are_required() -> None:
    with pytest.raises(InvalidOptionError, match=r"kafka\.bootstrap\.servers"):
        client_settings({"client.id": "x"})


def test_the_poll_timeout_is_sparks_option_in_milliseconds() -> None:
    assert parse(subscribe="t").poll_timeout == 120.0
    assert parse(subscribe="t", **{"kafkaConsumer.pollTimeoutMs": "4000"}).poll_timeout == 4.0
    with pytest.raises(InvalidOptionError, match=r"kafkaConsumer\.pollTimeoutMs"):
        parse(subscribe="t", **{"kafkaConsumer.pollTimeoutMs": "0"})
