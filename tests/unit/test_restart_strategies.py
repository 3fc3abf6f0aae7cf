"""Restart strategies with a fake clock: delays, jitter bounds, reset, attempts, rate window."""

from __future__ import annotations

import random

import pytest

from spark_ckpt.model.restart import ExponentialDelay, FailureRate, FixedDelay, NoRestart


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_none_never_restarts() -> None:
    """restartStrategy=none gives up at the first failure."""
    decision = NoRestart().on_failure()
    assert not decision.restart
    assert "none" in decision.reason


def test_fixed_delay_restarts_attempts_times_with_its_delay() -> None:
    """fixed-delay: N restarts after the same delay, then no more."""
    strategy = FixedDelay(attempts=2, delay=3.0)
    assert [strategy.on_failure().delay for _ in range(2)] == [3.0, 3.0]
    final = strategy.on_failure()
    assert not final.restart
    assert "2 restart(s)" in final.reason


def test_fixed_delay_defaults_follow_flink() -> None:
    """One attempt after one second."""
    strategy = FixedDelay()
    assert (strategy.attempts, strategy.delay) == (1, 1.0)


def test_exponential_delay_grows_by_the_multiplier_up_to_the_cap() -> None:
    """Without jitter the delays are 1, 2, 4, 8, 8 for multiplier 2 and cap 8."""
    strategy = ExponentialDelay(1.0, 8.0, 2.0, jitter=0.0, clock=Clock())
    assert [strategy.on_failure().delay for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]


def test_exponential_delay_jitter_stays_within_bounds() -> None:
    """Each delay lies within backoff * (1 +/- jitter)."""
    strategy = ExponentialDelay(10.0, 10.0, 1.5, jitter=0.1, clock=Clock(), rng=random.Random(1))
    delays = [strategy.on_failure().delay for _ in range(200)]
    assert all(9.0 <= d <= 11.0 for d in delays)
    assert len(set(delays)) > 100


def test_exponential_delay_resets_after_a_quiet_period() -> None:
    """A failure after resetBackoffThreshold without failures starts from the initial backoff."""
    clock = Clock()
    strategy = ExponentialDelay(1.0, 60.0, 2.0, jitter=0.0, reset_threshold=100.0, clock=clock)
    strategy.on_failure()
    strategy.on_failure()
    assert strategy.on_failure().delay == 4.0
    clock.now = 99.0
    assert strategy.on_failure().delay == 8.0
    clock.now = 199.0
    assert strategy.on_failure().delay == 1.0


def test_exponential_delay_attempts_are_counted_between_resets() -> None:
    """With attempts=2, the third failure without a quiet period gives up."""
    clock = Clock()
    strategy = ExponentialDelay(
        1.0, 60.0, jitter=0.0, reset_threshold=10.0, attempts=2, clock=clock
    )
    assert strategy.on_failure().restart
    assert strategy.on_failure().restart
    assert not strategy.on_failure().restart
    clock.now = 100.0
    assert strategy.on_failure().restart


def test_exponential_delay_defaults_follow_flink() -> None:
    """1 s to 1 min, x1.5, jitter 0.1, reset after 1 h, unlimited attempts."""
    strategy = ExponentialDelay()
    assert (
        strategy.initial_backoff,
        strategy.max_backoff,
        strategy.multiplier,
        strategy.jitter,
        strategy.reset_threshold,
        strategy.attempts,
    ) == (1.0, 60.0, 1.5, 0.1, 3600.0, float("inf"))


def test_failure_rate_counts_failures_within_the_window() -> None:
    """Two failures per 60 s are tolerated; a third inside the window is not."""
    clock = Clock()
    strategy = FailureRate(2, 60.0, 5.0, clock=clock)
    assert strategy.on_failure().delay == 5.0
    clock.now = 30.0
    assert strategy.on_failure().restart
    clock.now = 59.0
    assert not strategy.on_failure().restart


def test_failure_rate_forgets_failures_outside_the_window() -> None:
    """Failures older than the interval leave the window."""
    clock = Clock()
    strategy = FailureRate(1, 60.0, clock=clock)
    assert strategy.on_failure().restart
    clock.now = 61.0
    assert strategy.on_failure().restart


@pytest.mark.parametrize(
    "build",
    [
        lambda: FixedDelay(attempts=-1),
        lambda: ExponentialDelay(initial_backoff=10.0, max_backoff=1.0),
        lambda: ExponentialDelay(multiplier=0.5),
        lambda: ExponentialDelay(jitter=2.0),
        lambda: FailureRate(0),
    ],
)
def test_invalid_parameters_are_rejected(build: object) -> None:
    """Constructors validate their parameters."""
    with pytest.raises(ValueError, match=r"need|must"):
        build()  # type: ignore[operator]
