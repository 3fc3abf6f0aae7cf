"""One reader for data source options, shared by ``txn-cdc`` and ``delta-2pc``.

Spark hands a Python data source its options with lower-cased keys. :class:`OptionReader` looks
each one up by its documented spelling, refuses unknown keys (naming the closest valid one), and
turns values into typed Python values with errors that name the option, the value and what is
accepted. Each source, connector and sink then builds its own frozen options dataclass from it.

Pure Python, no Spark; runs wherever options are parsed (the driver, and executors that rebuild
a writer).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from spark_ckpt.errors import ConfigError, InvalidOptionError, UnknownOptionError
from spark_ckpt.model.durations import parse_duration

__all__ = ["OptionReader", "OptionSpec", "option_names", "option_prefixes"]

_SIZE = re.compile(r"^\s*(\d+)\s*(b|k|kb|m|mb|g|gb)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20}
_SIZE_UNITS |= {"g": 1 << 30, "gb": 1 << 30}

C = TypeVar("C", bound=str)


@dataclass(frozen=True)
class OptionSpec:
    """One option (or ``spark.ckpt.*`` key) as the reference documents it.

    Each data source, connector and the configuration declares its options once as a tuple of
    these: the names it accepts are derived from the tuple and the documentation site's
    reference tables are rendered from it, so an option cannot be accepted without being
    documented. Pure data, built at import time.

    Attributes
    ----------
    name
        The documented spelling (``maxChangesPerTrigger``); for a family of free keys, the
        prefix (``kafka.``).
    meaning
        What it does, in Markdown: one paragraph, as a reference table's cell shows it.
    default
        The value it takes when unset, spelled as a user would write it (``5min``); a test
        parses it and checks it gives what leaving the option out gives. None when there is no
        such value: see ``default_note``.
    default_note
        What the table shows when ``default`` is None (``required``, ``none``, ``per
        connector``).
    placeholder
        For a family of free keys, what follows the prefix (``setting`` in ``kafka.<setting>``);
        empty for a single option.
    """

    name: str
    meaning: str
    default: str | None = None
    default_note: str = "none"
    placeholder: str = ""

    @property
    def display_name(self) -> str:
        """The name as the reference shows it (``kafka.<setting>`` for a family)."""
        return f"{self.name}<{self.placeholder}>" if self.placeholder else self.name

    @property
    def display_default(self) -> str:
        """The default column's Markdown."""
        return f"`{self.default}`" if self.default is not None else self.default_note


def option_names(specs: Iterable[OptionSpec]) -> tuple[str, ...]:
    """The single options' names among ``specs``, in order (import time)."""
    return tuple(s.name for s in specs if not s.placeholder)


def option_prefixes(specs: Iterable[OptionSpec]) -> tuple[str, ...]:
    """The prefixes of the key families among ``specs``, in order (import time)."""
    return tuple(s.name for s in specs if s.placeholder)


class OptionReader:
    """The options of one data source, read by documented name.

    Parameters
    ----------
    options
        The options as Spark passed them (keys in any case).
    owner
        Who reads them, for messages (``"txn-cdc"``, ``"delta-2pc"``).
    names
        Every option ``owner`` accepts, in their documented spelling.
    ignored
        Lower-case keys that are not the user's (options Spark or spark-ckpt add).
    prefixes
        Option families taking free keys after a prefix (``storageOptions.``); see
        :meth:`prefixed`.

    Raises
    ------
    UnknownOptionError
        For a key that is neither in ``names`` nor ``ignored``; the message suggests the closest
        known name.
    """

    def __init__(
        self,
        options: Mapping[str, str],
        owner: str,
        names: Iterable[str],
        ignored: Iterable[str] = (),
        prefixes: Iterable[str] = (),
    ) -> None:
        self.owner = owner
        self._names = {name.lower(): name for name in names}
        self._values = {key.lower(): value for key, value in options.items()}
        self._prefixes = tuple(prefix.lower() for prefix in prefixes)
        skip = {key.lower() for key in ignored}
        for key in self._values:
            if key in self._names or key in skip:
                continue
            if any(key.startswith(p) and len(key) > len(p) for p in self._prefixes):
                continue
            raise UnknownOptionError(key, owner, list(self._names.values()))

    def prefixed(self, prefix: str) -> dict[str, str]:
        """The options ``<prefix><key>`` as ``{key: value}`` (keys lower-cased, as Spark gives)."""
        wanted = prefix.lower()
        return {
            key[len(wanted) :]: value
            for key, value in self._values.items()
            if key.startswith(wanted) and len(key) > len(wanted)
        }

    def given(self, name: str) -> bool:
        """True when the option was set."""
        return name.lower() in self._values

    def raw(self, name: str) -> str | None:
        """The value as given (None when unset)."""
        return self._values.get(name.lower())

    def text(self, name: str, default: str | None = None) -> str | None:
        """The value stripped of surrounding blanks; ``default`` when unset or blank."""
        value = self.raw(name)
        if value is None or not value.strip():
            return default
        return value.strip()

    def required(self, name: str, how: str) -> str:
        """The value of a required option.

        Parameters
        ----------
        how
            What the option is and how to set it, for the error message.
        """
        value = self.text(name)
        if value is None:
            raise ConfigError(f"{self.owner} needs the option {name!r}: {how}")
        return value

    def forbid(self, name: str, expected: str) -> None:
        """Refuse an option that makes no sense in this configuration."""
        value = self.raw(name)
        if value is not None and value.strip():
            raise InvalidOptionError(name, value, expected)

    def positive_int(self, name: str, default: int | None = None) -> int | None:
        """An integer >= 1."""
        raw = self.raw(name)
        if raw is None:
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            value = 0
        if value < 1:
            raise InvalidOptionError(name, raw, "a positive integer")
        return value

    def duration(
        self, name: str, default: float, *, allow_unlimited: bool = False, default_unit: str = "ms"
    ) -> float:
        """A positive duration in seconds, in Spark's forms (``500ms``, ``30s``, ``10min``).

        A bare number is in ``default_unit`` (milliseconds, as in Spark, unless documented).
        """
        raw = self.raw(name)
        if raw is None:
            return default
        accepted = "a duration such as 500ms, 30s, 10min, 1h" + (
            ", or unlimited" if allow_unlimited else ""
        )
        try:
            value = parse_duration(
                raw,
                key=f"option {name!r}",
                allow_unlimited=allow_unlimited,
                default_unit=default_unit,
            )
        except ConfigError as e:
            raise InvalidOptionError(name, raw, accepted) from e
        if value <= 0:
            raise InvalidOptionError(name, raw, "a positive duration")
        return value

    def size(self, name: str, default: int) -> int:
        """A positive size in bytes, optionally with ``k``, ``m`` or ``g``."""
        raw = self.raw(name)
        if raw is None:
            return default
        match = _SIZE.match(raw)
        if match is None or int(match.group(1)) < 1:
            raise InvalidOptionError(
                name, raw, "a positive size in bytes, optionally with k, m or g (128m)"
            )
        return int(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()]

    def boolean(self, name: str, default: bool) -> bool:
        """``true`` or ``false``, in any case."""
        raw = self.raw(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value not in ("true", "false"):
            raise InvalidOptionError(name, raw, "true or false")
        return value == "true"

    def choice(self, name: str, choices: tuple[C, ...], default: C) -> C:
        """One of ``choices`` (compared case-insensitively)."""
        raw = self.raw(name)
        if raw is None:
            return default
        by_value = {choice.lower(): choice for choice in choices}
        value = by_value.get(raw.strip().lower())
        if value is None:
            raise InvalidOptionError(name, raw, "one of: " + ", ".join(choices))
        return value

    def names(self, name: str, what: str = "names") -> tuple[str, ...]:
        """A comma-separated list of distinct ``what`` (empty when unset)."""
        raw = self.raw(name) or ""
        items = tuple(item.strip() for item in raw.split(",") if item.strip())
        if len(set(items)) != len(items):
            raise InvalidOptionError(name, raw, f"distinct {what}, separated by commas")
        return items
