"""spark.ckpt.* configuration: defaults, parsing, and errors that name key, value and forms."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from spark_ckpt.errors import ConfigError, UnknownOptionError
from spark_ckpt.model.config import DEFAULTS, CkptConfig
from spark_ckpt.model.restart import ExponentialDelay, FailureRate, FixedDelay, NoRestart

CONF = Path(__file__).resolve().parents[2] / "conf" / "spark-defaults.conf"


def config(**settings: str) -> CkptConfig:
    conf = {f"spark.ckpt.{k}": v for k, v in settings.items()}
    return CkptConfig.from_conf(conf.get)


def test_defaults_follow_flink() -> None:
    """Unset keys take the documented defaults."""
    parsed = config()
    assert parsed.tolerable_failed_checkpoints == 0
    assert math.isinf(parsed.tolerable_failure_timeout)
    assert parsed.checkpoint_timeout == 600.0
    strategy = parsed.restart_strategy_factory()()
    assert isinstance(strategy, ExponentialDelay)
    assert (strategy.initial_backoff, strategy.max_backoff) == (1.0, 60.0)


def test_spark_defaults_conf_lists_every_key_with_its_default() -> None:
    """conf/spark-defaults.conf and the code agree key for key."""
    listed = {}
    for line in CONF.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split()
            listed[key] = value
    assert listed == DEFAULTS


@pytest.mark.parametrize(
    ("settings", "kind"),
    [
        ({"restartStrategy": "none"}, NoRestart),
        ({"restartStrategy": "fixed-delay", "restartStrategy.fixedDelay.delay": "0s"}, FixedDelay),
        ({"restartStrategy": "failure-rate"}, FailureRate),
        ({"restartStrategy": "EXPONENTIAL-DELAY"}, ExponentialDelay),
    ],
)
def test_strategy_names_select_strategies(settings: dict[str, str], kind: type) -> None:
    """Each strategy name builds its strategy."""
    assert isinstance(config(**settings).restart_strategy_factory()(), kind)


@pytest.mark.parametrize(
    ("key", "value", "accepted"),
    [
        ("tolerableFailedCheckpoints", "-1", "an integer >= 0"),
        ("tolerableFailedCheckpoints", "many", "an integer >= 0"),
        ("tolerableFailureTimeout", "soon", "10min"),
        ("checkpointTimeout", "0s", "> 0"),
        ("restartStrategy", "reboot", "fixed-delay"),
        ("restartStrategy.exponentialDelay.jitterFactor", "2", "between 0 and 1"),
        ("restartStrategy.exponentialDelay.backoffMultiplier", "0.5", ">= 1"),
        ("restartStrategy.exponentialDelay.attempts", "x", "or unlimited"),
    ],
)
def test_bad_value_names_key_value_and_accepted(key: str, value: str, accepted: str) -> None:
    """A bad value is a ConfigError that names the key, the value and what is accepted."""
    with pytest.raises(ConfigError) as info:
        config(**{key: value})
    message = str(info.value)
    assert f"spark.ckpt.{key}" in message
    assert repr(value) in message
    assert accepted in message


def test_backoff_order_is_checked() -> None:
    """InitialBackoff may not exceed maxBackoff."""
    with pytest.raises(ConfigError, match="must not exceed"):
        config(**{"restartStrategy.exponentialDelay.initialBackoff": "2min"})


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("spark.ckpt.tolerableFailedCheckpoint", "spark.ckpt.tolerableFailedCheckpoints"),
        ("spark.ckpt.checkpointTimout", "spark.ckpt.checkpointTimeout"),
        (
            "spark.ckpt.restartStrategy.fixedDelay.attempt",
            "spark.ckpt.restartStrategy.fixedDelay.attempts",
        ),
    ],
)
def test_a_misspelt_key_is_refused_with_the_closest_known_key(typo: str, meant: str) -> None:
    conf = {typo: "3", "spark.sql.shuffle.partitions": "2"}
    with pytest.raises(UnknownOptionError) as info:
        CkptConfig.from_conf(conf.get, conf)
    assert info.value.suggestion == meant
    assert f"Did you mean {meant!r}?" in str(info.value)
    assert typo in str(info.value)


def test_keys_outside_the_prefix_and_known_keys_pass() -> None:
    conf = {"spark.ckpt.checkpointTimeout": "1min", "spark.ckptx.other": "1", "spark.master": "x"}
    assert CkptConfig.from_conf(conf.get, conf).checkpoint_timeout == 60.0
