"""Spark-style durations."""

from __future__ import annotations

import math

import pytest

from spark_ckpt.errors import ConfigError
from spark_ckpt.model.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        ("10min", 600.0),
        ("2m", 120.0),  # Spark reads a bare 'm' as minutes
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("250us", 0.00025),
        (" 15 s ", 15.0),
        ("1500", 1.5),  # a bare number takes the default unit (ms)
    ],
)
def test_spark_forms_parse(text: str, seconds: float) -> None:
    """Every suffix Spark's timeStringAs accepts parses to seconds."""
    assert parse_duration(text, key="k") == pytest.approx(seconds)


def test_bare_number_uses_the_keys_default_unit() -> None:
    """A key documented in seconds reads a bare number as seconds."""
    assert parse_duration("7", key="k", default_unit="s") == 7.0


def test_unlimited_only_where_allowed() -> None:
    """'unlimited' is infinity for keys that allow it and an error elsewhere."""
    assert math.isinf(parse_duration("unlimited", key="k", allow_unlimited=True))
    with pytest.raises(ConfigError, match="unlimited"):
        parse_duration("unlimited", key="k")


@pytest.mark.parametrize("bad", ["", "fast", "10 minutes", "1.5s", "-3s", "10x"])
def test_bad_value_names_key_value_and_accepted_forms(bad: str) -> None:
    """A bad duration is a ConfigError naming the key, the value and the accepted forms."""
    with pytest.raises(ConfigError) as info:
        parse_duration(bad, key="spark.ckpt.checkpointTimeout")
    message = str(info.value)
    assert "spark.ckpt.checkpointTimeout" in message
    assert repr(bad) in message
    assert "500ms" in message
    assert "10min" in message


def test_config_error_is_also_a_value_error() -> None:
    """Callers may catch the builtin."""
    with pytest.raises(ValueError, match="k"):
        parse_duration("nope", key="k")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (30.0, "30s"),
        (1.5, "1500ms"),
        (90.0, "90s"),
        (300.0, "5min"),
        (7200.0, "2h"),
        (math.inf, "unlimited"),
    ],
)
def test_format_round_trips(seconds: float, text: str) -> None:
    """Formatting renders the configuration's own spelling."""
    assert format_duration(seconds) == text
    assert parse_duration(text, key="k", allow_unlimited=True) == seconds
