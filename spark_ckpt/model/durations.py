"""Spark-style duration strings (``500ms``, ``30s``, ``10min``, ``1h``).

Spark parses durations with ``JavaUtils.timeStringAs``: an integer followed by one of the suffixes
``us``, ``ms``, ``s``, ``m``/``min``, ``h``, ``d``; a bare number takes the key's default unit.
This is that grammar, once, so every option and ``spark.ckpt.*`` key parses the same way.
"""

from __future__ import annotations

import re

from spark_ckpt.errors import ConfigError

__all__ = ["UNLIMITED", "format_duration", "parse_duration"]

UNLIMITED = float("inf")
"""The parsed value of ``unlimited`` (for keys that allow it)."""

_UNIT_SECONDS = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_PATTERN = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")
_ACCEPTED = "an integer with a unit: us, ms, s, m or min, h, d (for example 500ms, 30s, 10min, 1h)"


def parse_duration(
    value: str, *, key: str, default_unit: str = "ms", allow_unlimited: bool = False
) -> float:
    """Parse a Spark-style duration into seconds.

    Runs wherever configuration is read (driver), once per value.

    Parameters
    ----------
    value
        The text to parse, for example ``"30s"``.
    key
        The option or configuration key it came from; named in the error.
    default_unit
        The unit of a bare number, as in Spark (``ms`` unless the key documents otherwise).
    allow_unlimited
        Accept ``unlimited`` (and ``inf``), returning :data:`UNLIMITED`.

    Returns
    -------
    float
        The duration in seconds (``math.inf`` for unlimited).

    Raises
    ------
    ConfigError
        When the value is not a duration; the message names the key, the value and the forms
        accepted.
    """
    text = value.strip().lower()
    if allow_unlimited and text in {"unlimited", "inf", "infinite"}:
        return UNLIMITED
    match = _PATTERN.match(text)
    unit = (match.group(2) or default_unit) if match else ""
    if match is None or unit not in _UNIT_SECONDS:
        accepted = _ACCEPTED + (", or unlimited" if allow_unlimited else "")
        raise ConfigError(f"{key} has the invalid value {value!r}: expected {accepted}.")
    return int(match.group(1)) * _UNIT_SECONDS[unit]


def format_duration(seconds: float) -> str:
    """Render seconds the way the configuration spells them (``1500ms``, ``30s``, ``5min``)."""
    if seconds == UNLIMITED:
        return "unlimited"
    if seconds >= 3600 and float(seconds / 3600).is_integer():
        return f"{int(seconds // 3600)}h"
    if seconds >= 60 and float(seconds / 60).is_integer():
        return f"{int(seconds // 60)}min"
    if seconds >= 1 and float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"
