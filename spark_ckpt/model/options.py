"""Options declared once, and one reader for them, shared by ``txn-cdc`` and ``delta-2pc``.

Each option is one :class:`OptionSpec`: its name, its documentation, its type
(:mod:`.option_types`), its default as a typed value. A frozen options dataclass declares each of
its fields with :func:`declared`, and :func:`read_declared` reads them all: the parsing, the
error messages, the field's default and the reference's row all come from that one declaration
(Debezium's ``Field``, Flink's ``ConfigOption``).

Spark hands a Python data source its options with lower-cased keys. :class:`OptionReader` looks
each one up by its documented spelling, refuses unknown keys (naming the closest valid one), and
turns values into typed Python values with errors that name the option, the value and what is
accepted.

Pure Python, no Spark; runs wherever options are parsed (the driver, and executors that rebuild
a writer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from spark_ckpt.errors import ConfigError, InvalidOptionError, UnknownOptionError
from spark_ckpt.model.option_types import (
    Boolean,
    Choice,
    Duration,
    Names,
    OptionType,
    PositiveInt,
    Size,
)

__all__ = [
    "IDENTITY_OPTION",
    "OptionReader",
    "OptionSpec",
    "declared",
    "option_names",
    "option_prefixes",
    "read_declared",
]

C = TypeVar("C", bound=str)
T = TypeVar("T")
IDENTITY_OPTION = "__spark_ckpt_identity"
"""Internal option: the supervised query identity a source claimed when it was created."""
_SPEC = "spark_ckpt.option"  # a dataclass field's metadata key: the OptionSpec declaring it


@dataclass(frozen=True)
class OptionSpec(Generic[T]):
    """One option (or ``spark.ckpt.*`` key): its only declaration.

    Each data source, connector and the configuration declares its options once as a tuple of
    these: the names it accepts are derived from the tuple, the documentation site's reference
    tables are rendered from it, and an options dataclass's fields are :func:`declared` from it
    (their type, default and parsing), so an option cannot be accepted without being documented
    nor documented with a default it does not have. Pure data, built at import time.

    Attributes
    ----------
    name
        The documented spelling (``maxChangesPerTrigger``); for a family of free keys, the
        prefix (``kafka.``).
    meaning
        What it does, in Markdown: one paragraph, as a reference table's cell shows it.
    type
        What its value may be, and how text becomes that value (:mod:`.option_types`). None
        for a family of free keys, and for the ``spark.ckpt.*`` keys, which
        :class:`~spark_ckpt.model.config.CkptConfig` reads.
    default
        The value it takes when unset, typed (``300.0`` seconds, rendered ``5min``); None when
        there is no such value: see ``default_note``.
    default_note
        What the table shows when ``default`` is None (``required``, ``none``, ``per
        connector``).
    placeholder
        For a family of free keys, what follows the prefix (``setting`` in ``kafka.<setting>``);
        empty for a single option.
    required
        For an option that must be given: what it is and how to set it, for the error that
        says it is missing. Empty for an optional one.
    """

    name: str
    meaning: str
    type: OptionType[T] | None = None
    default: T | None = None
    default_note: str = "none"
    placeholder: str = ""
    required: str = ""

    @property
    def display_name(self) -> str:
        """The name as the reference shows it (``kafka.<setting>`` for a family)."""
        return f"{self.name}<{self.placeholder}>" if self.placeholder else self.name

    @property
    def display_default(self) -> str:
        """The default column's Markdown."""
        if self.default is None or self.default == ():  # an empty list is no value
            return "required" if self.required else self.default_note
        text = str(self.default) if self.type is None else self.type.render(self.default)
        return f"`{text}`"

    def unset_in(self, reader: OptionReader) -> bool:
        """True when ``reader`` lacks the option (or has it blank, for a type where that counts)."""
        raw = reader.raw(self.name)
        blank = self.type is not None and self.type.blank_is_unset
        return raw is None or (blank and not raw.strip())

    def read(self, reader: OptionReader) -> T | None:
        """The option's value from ``reader``: its default when unset.

        Runs where the options are parsed (the driver; executors rebuilding a writer).

        Raises
        ------
        ConfigError
            When a required option is missing.
        InvalidOptionError
            When the value is not one the option's type accepts.
        """
        if self.type is None:
            raise TypeError(f"option {self.name!r} has no type to read it with")
        raw = reader.raw(self.name)
        if raw is None or self.unset_in(reader):
            if self.required:
                raise ConfigError(f"{reader.owner} needs the option {self.name!r}: {self.required}")
            return self.default
        try:
            return self.type.parse(raw)
        except InvalidOptionError:
            raise  # a type that says more than its accepted form (a regular expression's error)
        except ValueError as e:
            raise InvalidOptionError(self.name, raw, self.type.accepted) from e


def declared(spec: OptionSpec[T]) -> T:
    """A dataclass field read from ``spec``: its default is the declaration's.

    Used in the body of an options dataclass (``snapshot_chunk_rows: int =
    declared(SNAPSHOT_CHUNK_ROWS)``); :func:`read_declared` then reads every such field. A
    required option's field has no default. Import time.
    """
    metadata = {_SPEC: spec}
    if spec.required:
        return cast(T, dataclasses.field(metadata=metadata))
    return cast(T, dataclasses.field(default=spec.default, metadata=metadata))


def declared_fields(cls: type[Any]) -> dict[str, OptionSpec[Any]]:
    """The fields of options dataclass ``cls`` made by :func:`declared`, and their options."""
    return {f.name: f.metadata[_SPEC] for f in dataclasses.fields(cls) if _SPEC in f.metadata}


def read_declared(cls: type[Any], reader: OptionReader, owner: str = "") -> dict[str, Any]:
    """Every :func:`declared` field of ``cls``, read from ``reader`` (field name -> value).

    Runs where the options are parsed, once per parse.

    Parameters
    ----------
    owner
        Who needs the options, for the message naming the missing ones (``the postgres
        connector``); the reader's owner when empty.

    Raises
    ------
    ConfigError
        Naming every required option that is missing, and how to set each.
    InvalidOptionError
        For the first value an option's type does not accept.
    """
    fields = declared_fields(cls)
    missing = [spec for spec in fields.values() if spec.required and spec.unset_in(reader)]
    if missing:
        names = ", ".join(repr(spec.name) for spec in missing)
        plural = "s" if len(missing) > 1 else ""
        hows = "; ".join(spec.required for spec in missing)
        raise ConfigError(f"{owner or reader.owner} needs the option{plural} {names}: {hows}")
    return {name: spec.read(reader) for name, spec in fields.items()}


def option_names(specs: Iterable[OptionSpec[Any]]) -> tuple[str, ...]:
    """The single options' names among ``specs``, in order (import time)."""
    return tuple(s.name for s in specs if not s.placeholder)


def option_prefixes(specs: Iterable[OptionSpec[Any]]) -> tuple[str, ...]:
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

    def value(self, name: str, kind: OptionType[T], default: T | None) -> T | None:
        """Option ``name`` read as ``kind``; ``default`` when unset (blank, for some kinds)."""
        return OptionSpec(name, "", kind, default).read(self)

    def positive_int(self, name: str, default: int | None = None) -> int | None:
        """An integer >= 1."""
        return self.value(name, PositiveInt(), default)

    def duration(
        self, name: str, default: float, *, allow_unlimited: bool = False, default_unit: str = "ms"
    ) -> float:
        """A positive duration in seconds, in Spark's forms (``500ms``, ``30s``, ``10min``).

        A bare number is in ``default_unit`` (milliseconds, as in Spark, unless documented).
        """
        kind = Duration(unlimited=allow_unlimited, unit=default_unit)
        value = self.value(name, kind, default)
        assert value is not None
        return value

    def size(self, name: str, default: int) -> int:
        """A positive size in bytes, optionally with ``k``, ``m`` or ``g``."""
        value = self.value(name, Size(), default)
        assert value is not None
        return value

    def boolean(self, name: str, default: bool) -> bool:
        """``true`` or ``false``, in any case."""
        value = self.value(name, Boolean(), default)
        assert value is not None
        return value

    def choice(self, name: str, choices: tuple[C, ...], default: C) -> C:
        """One of ``choices`` (compared case-insensitively)."""
        value = self.value(name, Choice(choices), default)
        assert value is not None
        return value

    def names(self, name: str, what: str = "names") -> tuple[str, ...]:
        """A comma-separated list of distinct ``what`` (empty when unset)."""
        value = self.value(name, Names(what), ())
        assert value is not None
        return value
