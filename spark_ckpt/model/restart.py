"""Restart strategies with Flink's semantics and defaults (pure; clock and randomness injected).

``none`` never restarts; ``fixed-delay`` restarts up to N times after a constant delay;
``exponential-delay`` doubles (x ``backoffMultiplier``) its delay from ``initialBackoff`` up to
``maxBackoff`` with +/- ``jitterFactor`` jitter, resets to the initial backoff after
``resetBackoffThreshold`` without failure, and may cap the attempts; ``failure-rate`` restarts
after a constant delay as long as no more than N failures fall within the interval.
"""

from __future__ import annotations

import abc
import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from spark_ckpt.errors import UsageError

__all__ = [
    "ExponentialDelay",
    "FailureRate",
    "FixedDelay",
    "NoRestart",
    "RestartDecision",
    "RestartStrategy",
]


@dataclass(frozen=True)
class RestartDecision:
    """Whether to restart after a failure, and after how long.

    Attributes
    ----------
    restart
        False when the strategy allows no more restarts.
    delay
        Seconds to wait before restarting.
    reason
        Why not, when ``restart`` is False.
    """

    restart: bool
    delay: float = 0.0
    reason: str = ""


class RestartStrategy(abc.ABC):
    """Decides, failure by failure, whether and when a query is restarted (driver)."""

    name: str

    @abc.abstractmethod
    def on_failure(self) -> RestartDecision:
        """Decide, for a failover happening now, whether the query restarts and after what delay."""


class NoRestart(RestartStrategy):
    """``none``: never restart."""

    name = "none"

    def on_failure(self) -> RestartDecision:
        """Never restart."""
        return RestartDecision(False, reason="restartStrategy=none")


class FixedDelay(RestartStrategy):
    """``fixed-delay``: up to ``attempts`` restarts, each after ``delay`` seconds.

    Parameters
    ----------
    attempts
        Restarts allowed in all (Flink default 1).
    delay
        Seconds before each restart (Flink default 1 s).
    """

    name = "fixed-delay"

    def __init__(self, attempts: int = 1, delay: float = 1.0) -> None:
        if attempts < 0 or delay < 0:
            raise UsageError(f"attempts and delay must be >= 0, got {attempts}, {delay}")
        self.attempts = attempts
        self.delay = delay
        self._failures = 0

    def on_failure(self) -> RestartDecision:
        """Restart while fewer than ``attempts`` restarts were made."""
        self._failures += 1
        if self._failures > self.attempts:
            return RestartDecision(
                False, reason=f"fixed-delay allows {self.attempts} restart(s), all used"
            )
        return RestartDecision(True, self.delay)


class ExponentialDelay(RestartStrategy):
    """``exponential-delay``: growing delays with jitter, reset after a quiet period.

    Parameters
    ----------
    initial_backoff, max_backoff
        First delay and the cap (Flink defaults 1 s and 1 min).
    multiplier
        Growth per failure (1.5).
    jitter
        Relative jitter, the delay is drawn from ``backoff * (1 +/- jitter)`` (0.1).
    reset_threshold
        Seconds without failure after which the backoff (and the attempt count) start over (1 h).
    attempts
        Restarts allowed before the backoff resets (``math.inf``: unlimited, the default).
    clock, rng
        Time source (seconds) and randomness.
    """

    name = "exponential-delay"

    def __init__(
        self,
        initial_backoff: float = 1.0,
        max_backoff: float = 60.0,
        multiplier: float = 1.5,
        jitter: float = 0.1,
        reset_threshold: float = 3600.0,
        attempts: float = math.inf,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 < initial_backoff <= max_backoff:
            raise UsageError(
                f"need 0 < initialBackoff <= maxBackoff, got {initial_backoff}, {max_backoff}"
            )
        if multiplier < 1 or not 0 <= jitter <= 1 or reset_threshold <= 0 or attempts < 0:
            raise UsageError(
                "need backoffMultiplier >= 1, 0 <= jitterFactor <= 1, resetBackoffThreshold > 0, "
                f"attempts >= 0; got {multiplier}, {jitter}, {reset_threshold}, {attempts}"
            )
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.multiplier = multiplier
        self.jitter = jitter
        self.reset_threshold = reset_threshold
        self.attempts = attempts
        self._clock = clock
        self._rng = rng or random.Random()
        self._backoff = initial_backoff
        self._last_failure: float | None = None
        self._since_reset = 0

    def on_failure(self) -> RestartDecision:
        """Restart after the current backoff (jittered); then grow it."""
        now = self._clock()
        if self._last_failure is not None and now - self._last_failure >= self.reset_threshold:
            self._backoff = self.initial_backoff
            self._since_reset = 0
        self._last_failure = now
        self._since_reset += 1
        if self._since_reset > self.attempts:
            return RestartDecision(
                False,
                reason=f"exponential-delay allows {self.attempts:g} restart(s) without a quiet "
                f"period of {self.reset_threshold:g}s, all used",
            )
        backoff = self._backoff
        self._backoff = min(self._backoff * self.multiplier, self.max_backoff)
        spread = backoff * self.jitter
        delay = backoff + self._rng.uniform(-spread, spread) if spread else backoff
        return RestartDecision(True, max(0.0, delay))


class FailureRate(RestartStrategy):
    """``failure-rate``: restart unless more than N failures fall within the interval.

    Parameters
    ----------
    max_failures_per_interval
        Failures tolerated within one interval (Flink default 1).
    interval
        The window in seconds (1 min).
    delay
        Seconds before each restart (1 s).
    clock
        Time source (seconds).
    """

    name = "failure-rate"

    def __init__(
        self,
        max_failures_per_interval: int = 1,
        interval: float = 60.0,
        delay: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_failures_per_interval < 1 or interval <= 0 or delay < 0:
            raise UsageError(
                "need maxFailuresPerInterval >= 1, failureRateInterval > 0, delay >= 0; got "
                f"{max_failures_per_interval}, {interval}, {delay}"
            )
        self.max_failures = max_failures_per_interval
        self.interval = interval
        self.delay = delay
        self._clock = clock
        self._failures: deque[float] = deque()

    def on_failure(self) -> RestartDecision:
        """Restart while the failures within the last interval stay within the limit."""
        now = self._clock()
        self._failures.append(now)
        while self._failures and now - self._failures[0] > self.interval:
            self._failures.popleft()
        if len(self._failures) > self.max_failures:
            return RestartDecision(
                False,
                reason=f"{len(self._failures)} failures within {self.interval:g}s exceed "
                f"failure-rate maxFailuresPerInterval={self.max_failures}",
            )
        return RestartDecision(True, self.delay)
