"""The ``spark.ckpt.*`` configuration keys: defaults, parsing and validation (pure).

Every key of DESIGN.md §2 with Flink's default where Flink has one. Values are read through a
getter (``spark.conf.get``), so this module imports nothing from Spark; a bad value is a
:class:`~spark_ckpt.errors.ConfigError` that names the key, the value and what is accepted.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from spark_ckpt.errors import ConfigError, UnknownOptionError
from spark_ckpt.model.durations import UNLIMITED, parse_duration
from spark_ckpt.model.options import OptionSpec
from spark_ckpt.model.restart import (
    ExponentialDelay,
    FailureRate,
    FixedDelay,
    NoRestart,
    RestartStrategy,
)

__all__ = ["DEFAULTS", "KEYS", "PREFIX", "CkptConfig"]

PREFIX = "spark.ckpt."

StrategyName = Literal["none", "fixed-delay", "exponential-delay", "failure-rate"]
_STRATEGIES: tuple[StrategyName, ...] = ("none", "fixed-delay", "exponential-delay", "failure-rate")

_RESTART = "spark.ckpt.restartStrategy."
METRICS_PORT = "spark.ckpt.metrics.port"
METRICS_HOST = "spark.ckpt.metrics.host"
_EXPONENTIAL = _RESTART + "exponentialDelay."

KEYS: tuple[OptionSpec[str], ...] = (
    OptionSpec(
        "spark.ckpt.tolerableFailedCheckpoints",
        "how many consecutive counted checkpoint failures (an expired batch, a source's hard "
        "decline, held-back data escalated by `softDeclineTimeout`) are tolerated; one more "
        "fails the query over (Flink's `execution.checkpointing.tolerable-failed-checkpoints`)",
        default="0",
    ),
    OptionSpec(
        "spark.ckpt.tolerableFailureTimeout",
        "no completed checkpoint for this long while a source holds data back fails the query "
        "over (an idle source never does); `unlimited` turns it off",
        default="unlimited",
    ),
    OptionSpec(
        "spark.ckpt.checkpointTimeout",
        "a batch running longer than this is an expired checkpoint, a counted failure "
        "(supervised queries; Flink's `execution.checkpointing.timeout`)",
        default="10min",
    ),
    OptionSpec(
        "spark.ckpt.restartStrategy",
        "what a failed supervised query does: `exponential-delay`, `fixed-delay`, "
        "`failure-rate` or `none` (Flink's restart strategies, with Flink's default)",
        default="exponential-delay",
    ),
    OptionSpec(
        _RESTART + "fixedDelay.attempts",
        "`fixed-delay`: restarts before the query fails for good",
        default="1",
    ),
    OptionSpec(
        _RESTART + "fixedDelay.delay", "`fixed-delay`: the wait before each restart", default="1s"
    ),
    OptionSpec(
        _EXPONENTIAL + "initialBackoff",
        "`exponential-delay`: the wait before the first restart",
        default="1s",
    ),
    OptionSpec(
        _EXPONENTIAL + "maxBackoff",
        "`exponential-delay`: the longest wait (finite, at least `initialBackoff`)",
        default="1min",
    ),
    OptionSpec(
        _EXPONENTIAL + "backoffMultiplier",
        "`exponential-delay`: each wait is the last one times this (at least 1)",
        default="1.5",
    ),
    OptionSpec(
        _EXPONENTIAL + "jitterFactor",
        "`exponential-delay`: each wait varies randomly by up to this fraction (0 to 1), so "
        "queries that failed together do not restart together",
        default="0.1",
    ),
    OptionSpec(
        _EXPONENTIAL + "resetBackoffThreshold",
        "`exponential-delay`: a query that ran this long without failing starts again from "
        "`initialBackoff` (and its attempts are counted afresh)",
        default="1h",
    ),
    OptionSpec(
        _EXPONENTIAL + "attempts",
        "`exponential-delay`: restarts before the query fails for good (counted since the "
        "last reset); `unlimited` never gives up",
        default="unlimited",
    ),
    OptionSpec(
        _RESTART + "failureRate.maxFailuresPerInterval",
        "`failure-rate`: failures within one interval before the query fails for good",
        default="1",
    ),
    OptionSpec(
        _RESTART + "failureRate.failureRateInterval",
        "`failure-rate`: the sliding window failures are counted in",
        default="1min",
    ),
    OptionSpec(
        _RESTART + "failureRate.delay", "`failure-rate`: the wait before each restart", default="1s"
    ),
    OptionSpec(
        METRICS_PORT,
        "the port the control plane serves its Prometheus metrics on (`/metrics`), from "
        "`install()` until the session ends; `off` serves none, `0` takes a free port "
        "(`Control.metrics.port` tells which)",
        default="off",
    ),
    OptionSpec(
        METRICS_HOST,
        "the address the metrics endpoint binds to: loopback by default, so only this machine "
        "can scrape it; `0.0.0.0` for every interface",
        default="127.0.0.1",
    ),
)
"""Every ``spark.ckpt.*`` key, documented: the reference's table and :data:`DEFAULTS`."""

DEFAULTS: dict[str, str] = {k.name: k.default for k in KEYS if k.default is not None}
"""Every key and its default, as ``conf/spark-defaults.conf`` lists them."""


def _int(key: str, raw: str, *, minimum: int, unlimited: bool = False) -> float:
    text = raw.strip().lower()
    if unlimited and text in ("unlimited", "inf"):
        return math.inf
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        accepted = f"an integer >= {minimum}" + (", or unlimited" if unlimited else "")
        raise ConfigError(f"{key} has the invalid value {raw!r}: expected {accepted}.")
    return value


def _float(key: str, raw: str, *, low: float, high: float = math.inf) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not low <= value <= high:
        bound = f"between {low:g} and {high:g}" if high != math.inf else f">= {low:g}"
        raise ConfigError(f"{key} has the invalid value {raw!r}: expected a number {bound}.")
    return value


@dataclass(frozen=True)
class CkptConfig:
    """The parsed ``spark.ckpt.*`` settings (driver, once per ``install``).

    Attributes mirror the keys; durations are seconds (``math.inf`` for unlimited).
    """

    tolerable_failed_checkpoints: int
    tolerable_failure_timeout: float
    checkpoint_timeout: float
    restart_strategy: StrategyName
    values: dict[str, str]
    metrics_port: int | None = None
    """The metrics endpoint's port (None: off; 0: a free one)."""
    metrics_host: str = "127.0.0.1"

    @classmethod
    def from_conf(cls, get: Callable[[str], str | None], present: Iterable[str] = ()) -> CkptConfig:
        """Read every key through ``get`` (None: unset, use the default) and validate it.

        ``present`` are the keys the session has set (all of them, or only ``spark.ckpt.*``):
        one under ``spark.ckpt.`` that is not a known key is a typo, refused with the closest
        known key, since an ignored setting is a policy silently not applied.

        Raises
        ------
        UnknownOptionError
            For an unknown ``spark.ckpt.*`` key (a :class:`ConfigError`).
        ConfigError
            Naming the key, the value and the accepted forms.
        """
        for key in present:
            if key.startswith(PREFIX) and key not in DEFAULTS:
                raise UnknownOptionError(key, "spark-ckpt's configuration", list(DEFAULTS))
        values = {key: (get(key) or default) for key, default in DEFAULTS.items()}
        config = cls(
            tolerable_failed_checkpoints=int(
                _int(
                    "spark.ckpt.tolerableFailedCheckpoints",
                    values["spark.ckpt.tolerableFailedCheckpoints"],
                    minimum=0,
                )
            ),
            tolerable_failure_timeout=cls._duration(values, "spark.ckpt.tolerableFailureTimeout"),
            checkpoint_timeout=cls._duration(values, "spark.ckpt.checkpointTimeout"),
            restart_strategy=cls._strategy(values["spark.ckpt.restartStrategy"]),
            values=values,
            metrics_port=cls._port(values[METRICS_PORT]),
            metrics_host=cls._host(values[METRICS_HOST]),
        )
        config.restart_strategy_factory()  # validate the chosen strategy's keys now
        return config

    @staticmethod
    def _duration(values: dict[str, str], key: str, *, allow_zero: bool = False) -> float:
        seconds = parse_duration(values[key], key=key, allow_unlimited=not allow_zero)
        if seconds < 0 or (seconds == 0 and not allow_zero):
            raise ConfigError(f"{key} has the invalid value {values[key]!r}: expected > 0.")
        return seconds

    @staticmethod
    def _port(raw: str) -> int | None:
        text = raw.strip().lower()
        if text in ("off", "none", ""):
            return None
        port = int(_int(METRICS_PORT, raw, minimum=0))
        if port > 65535:
            raise ConfigError(
                f"{METRICS_PORT} has the invalid value {raw!r}: expected a port (0 to 65535) "
                f"or off."
            )
        return port

    @staticmethod
    def _host(raw: str) -> str:
        host = raw.strip()
        if not host or any(c.isspace() for c in host):
            raise ConfigError(
                f"{METRICS_HOST} has the invalid value {raw!r}: expected an address such as "
                f"127.0.0.1 or 0.0.0.0."
            )
        return host

    @staticmethod
    def _strategy(raw: str) -> StrategyName:
        by_name: dict[str, StrategyName] = {name: name for name in _STRATEGIES}
        name = raw.strip().lower()
        if name not in by_name:
            raise ConfigError(
                f"spark.ckpt.restartStrategy has the invalid value {raw!r}: expected one of "
                f"{', '.join(_STRATEGIES)}."
            )
        return by_name[name]

    def restart_strategy_factory(
        self,
        clock: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> Callable[[], RestartStrategy]:
        """A factory of fresh strategy instances configured by these settings."""
        v = self.values
        p = "spark.ckpt.restartStrategy."
        now = clock or time.monotonic
        if self.restart_strategy == "none":
            return NoRestart
        if self.restart_strategy == "fixed-delay":
            attempts = int(_int(p + "fixedDelay.attempts", v[p + "fixedDelay.attempts"], minimum=0))
            delay = self._duration(v, p + "fixedDelay.delay", allow_zero=True)
            return lambda: FixedDelay(attempts, delay)
        if self.restart_strategy == "failure-rate":
            failures = int(
                _int(
                    p + "failureRate.maxFailuresPerInterval",
                    v[p + "failureRate.maxFailuresPerInterval"],
                    minimum=1,
                )
            )
            interval = self._duration(v, p + "failureRate.failureRateInterval")
            delay = self._duration(v, p + "failureRate.delay", allow_zero=True)
            return lambda: FailureRate(failures, interval, delay, clock=now)
        e = p + "exponentialDelay."
        initial = self._duration(v, e + "initialBackoff")
        maximum = self._duration(v, e + "maxBackoff")
        if initial > maximum or maximum == UNLIMITED:
            raise ConfigError(
                f"{e}initialBackoff ({v[e + 'initialBackoff']}) must not exceed a finite "
                f"{e}maxBackoff ({v[e + 'maxBackoff']})."
            )
        multiplier = _float(e + "backoffMultiplier", v[e + "backoffMultiplier"], low=1.0)
        jitter = _float(e + "jitterFactor", v[e + "jitterFactor"], low=0.0, high=1.0)
        reset = self._duration(v, e + "resetBackoffThreshold")
        before_reset = _int(e + "attempts", v[e + "attempts"], minimum=0, unlimited=True)
        return lambda: ExponentialDelay(
            initial, maximum, multiplier, jitter, reset, before_reset, clock=now, rng=rng
        )
