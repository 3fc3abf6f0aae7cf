"""What an option's value may be: each type parses the user's text and renders a default back.

An :class:`~spark_ckpt.model.options.OptionSpec` carries one of these, so an option's parsing,
its error message ("expected a positive integer"), and the default its reference row shows are
derived from one declaration (Debezium's ``Field.Type`` with its validator, Flink's
``ConfigOptions.key(..).intType()``). Pure Python; parsing runs wherever options are read (the
driver, and executors that rebuild a sink's writer), rendering when the docs are built.
"""

from __future__ import annotations

import abc
import math
import re
from collections.abc import Callable
from typing import Generic, TypeVar

from spark_ckpt.errors import ConfigError
from spark_ckpt.model.durations import parse_duration

__all__ = [
    "Boolean",
    "Choice",
    "Duration",
    "Names",
    "OptionType",
    "Parsed",
    "PositiveInt",
    "Size",
    "Text",
]

T = TypeVar("T")
C = TypeVar("C", bound=str)

_SIZE = re.compile(r"^\s*(\d+)\s*(b|k|kb|m|mb|g|gb)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20}
_SIZE_UNITS |= {"g": 1 << 30, "gb": 1 << 30}


class OptionType(abc.ABC, Generic[T]):
    """How an option's text becomes a typed value, and how a value is written back.

    Attributes
    ----------
    accepted
        What the type accepts, in words, for error messages (``"a positive integer"``).
    blank_is_unset
        True when a blank value means the option was left out (a text, a list of names);
        otherwise a blank value is refused like any other unaccepted text.
    """

    accepted: str = ""
    blank_is_unset: bool = False

    @abc.abstractmethod
    def parse(self, text: str) -> T:
        """The value of ``text``; raises ValueError when ``text`` is not accepted."""

    def render(self, value: T) -> str:
        """``value`` spelled as a user would write it (the reference's default column)."""
        return str(value)


class Text(OptionType[str]):
    """Any non-blank text, stripped; with ``pattern``, only text matching it whole."""

    blank_is_unset = True

    def __init__(self, pattern: str | None = None, accepted: str = "a non-empty text") -> None:
        self.pattern = None if pattern is None else re.compile(pattern)
        self.accepted = accepted

    def parse(self, text: str) -> str:
        """The stripped text, when it matches the pattern."""
        value = text.strip()
        if not value or (self.pattern is not None and not self.pattern.fullmatch(value)):
            raise ValueError(text)
        return value


class PositiveInt(OptionType[int]):
    """An integer of at least 1."""

    accepted = "a positive integer"

    def parse(self, text: str) -> int:
        """The integer, when it is at least 1."""
        value = int(text.strip())
        if value < 1:
            raise ValueError(text)
        return value


class Boolean(OptionType[bool]):
    """``true`` or ``false``, in any case."""

    accepted = "true or false"

    def parse(self, text: str) -> bool:
        """True or False."""
        value = text.strip().lower()
        if value not in ("true", "false"):
            raise ValueError(text)
        return value == "true"

    def render(self, value: bool) -> str:
        """``true`` or ``false``."""
        return "true" if value else "false"


class Size(OptionType[int]):
    """A positive number of bytes, optionally with ``k``, ``m`` or ``g`` (binary units)."""

    accepted = "a positive size in bytes, optionally with k, m or g (128m)"

    def parse(self, text: str) -> int:
        """The number of bytes."""
        match = _SIZE.match(text)
        if match is None or int(match.group(1)) < 1:
            raise ValueError(text)
        return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]

    def render(self, value: int) -> str:
        """The largest unit that divides ``value`` (``134217728`` -> ``128m``)."""
        for unit, factor in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
            if value % factor == 0:
                return f"{value // factor}{unit}"
        return str(value)


class Duration(OptionType[float]):
    """A positive duration in seconds, in Spark's forms (``500ms``, ``30s``, ``10min``, ``1h``).

    Parameters
    ----------
    unlimited
        Also accept ``unlimited`` (infinity: never).
    unit
        The unit of a bare number: ``ms`` as in Spark, unless the option documents ``s``.
    """

    def __init__(self, *, unlimited: bool = False, unit: str = "ms") -> None:
        self.unlimited = unlimited
        self.unit = unit
        self.accepted = "a duration such as 500ms, 30s, 10min, 1h" + (
            ", or unlimited" if unlimited else ""
        )

    def parse(self, text: str) -> float:
        """The duration in seconds (``math.inf`` for ``unlimited``)."""
        try:
            value = parse_duration(
                text, key="option", allow_unlimited=self.unlimited, default_unit=self.unit
            )
        except ConfigError as e:
            raise ValueError(text) from e
        if value <= 0:
            raise ValueError(text)
        return value

    def render(self, value: float) -> str:
        """The largest whole unit (``300.0`` -> ``5min``; ``math.inf`` -> ``unlimited``)."""
        if math.isinf(value):
            return "unlimited"
        for unit, seconds in (("h", 3600), ("min", 60), ("s", 1)):
            if value >= seconds and value % seconds == 0:
                return f"{int(value // seconds)}{unit}"
        return f"{round(value * 1000)}ms"


class Choice(OptionType[C]):
    """One of a closed set of words, compared case-insensitively; the value keeps its spelling."""

    def __init__(self, values: tuple[C, ...]) -> None:
        self.values = values
        self.accepted = "one of: " + ", ".join(values)

    def parse(self, text: str) -> C:
        """The accepted word ``text`` names."""
        by_value = {value.lower(): value for value in self.values}
        value = by_value.get(text.strip().lower())
        if value is None:
            raise ValueError(text)
        return value


class Names(OptionType[tuple[str, ...]]):
    """A comma-separated list of distinct names (blank entries ignored)."""

    blank_is_unset = True

    def __init__(self, what: str = "names") -> None:
        self.accepted = f"distinct {what}, separated by commas"

    def parse(self, text: str) -> tuple[str, ...]:
        """The names, in order."""
        items = tuple(item.strip() for item in text.split(",") if item.strip())
        if len(set(items)) != len(items):
            raise ValueError(text)
        return items

    def render(self, value: tuple[str, ...]) -> str:
        """The names joined by commas."""
        return ",".join(value)


class Parsed(OptionType[T]):
    """A value with a syntax of its own, read by ``parse`` (which raises ValueError).

    Parameters
    ----------
    parse
        Text to value; raises ValueError for text it does not accept.
    accepted
        The syntax, in words, for the error message.
    render
        Value to text, for the reference's default column (``str`` when not given).
    blank_is_unset
        Whether a blank value means the option was left out.
    """

    def __init__(
        self,
        parse: Callable[[str], T],
        accepted: str,
        render: Callable[[T], str] = str,
        *,
        blank_is_unset: bool = True,
    ) -> None:
        self._parse = parse
        self._render = render
        self.accepted = accepted
        self.blank_is_unset = blank_is_unset

    def parse(self, text: str) -> T:
        """The value of ``text``."""
        return self._parse(text)

    def render(self, value: T) -> str:
        """The value as text."""
        return self._render(value)
