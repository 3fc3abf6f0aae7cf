"""Column types and values from Kafka Connect's JSON envelope (``{"schema": ..., "payload": ...}``).

With ``columnTypes=true``, a change event written with ``schemas.enable=true`` says what its row
images hold; they map to the Spark SQL types of the ``column_types`` column, and the values whose
JSON form is an encoding are rewritten to the form the type's readers (a mirror's
:func:`~spark_ckpt.sinks.mirror.types.to_arrow`) take:

===============================================  =================  =========================
Kafka Connect schema (``type`` / ``name``)       Spark SQL type     value after rewriting
===============================================  =================  =========================
``int8`` .. ``int64``; ``float``/``float32``,    ``tinyint`` ..     as written
``double``/``float64``; ``boolean``; ``string``  ``bigint``;
                                                 ``float``,
                                                 ``double``;
                                                 ``boolean``;
                                                 ``string``
``bytes``                                        ``binary``         base64, as written
``org.apache.kafka.connect.data.Decimal``        ``decimal(p,s)``   every digit, at the
(``scale``, ``connect.decimal.precision``)       (p from the        column's scale
                                                 parameter, else    (``"-0.001"``)
                                                 38); ``string``
                                                 when p > 38
``io.debezium.data.VariableScaleDecimal``        ``string``         every digit, at the
(``{"scale": s, "value": base64}``)                                 value's own scale
``io.debezium.time.Date``, Connect's ``Date``    ``date``           days since the epoch
``io.debezium.time.IsoDate``                     ``date``           ``"2026-01-01"``
``io.debezium.time.Time`` (ms), ``MicroTime``,   ``string``         PostgreSQL's text of the
``NanoTime``, Connect's ``Time`` (ms),                              time of day
``io.debezium.time.IsoTime``                                        (``"10:15:30.5"``,
                                                                    ``"24:00:00"``)
``io.debezium.time.ZonedTime``                   ``string``         as written (in UTC:
                                                                    ``"08:15:30.5Z"``)
``io.debezium.time.Timestamp`` (ms),             ``timestamp_ntz``  microseconds since the
``MicroTimestamp``, ``NanoTimestamp``,                              epoch
Connect's ``Timestamp`` (ms)
``io.debezium.time.IsoTimestamp``                ``timestamp_ntz``  ISO text without ``Z``
``io.debezium.time.ZonedTimestamp``              ``timestamp``      ISO text, as written
``array`` of T                                   ``array<T's        each element as for T
                                                 type>``
anything else (``struct``, ``map``, ``Json``,    ``string``         as written (a mirror
``Uuid``, ``Enum``, ``Interval``, ...)                              holds objects as JSON
                                                                    text)
===============================================  =================  =========================

This follows Debezium's documentation of its PostgreSQL connector's data type mappings
(https://debezium.io/documentation/reference/3.6/connectors/postgresql.html#postgresql-data-types:
``#postgresql-basic-types``, ``#postgresql-temporal-types`` for ``time.precision.mode``
``adaptive``, ``adaptive_time_microseconds``, ``connect`` and ``isostring``,
``#postgresql-decimal-types`` for ``decimal.handling.mode`` ``precise``, ``double`` and
``string``) and what Debezium 3.6.1 writes, captured in ``tests/fixtures/debezium/types-*``.
Modes that write a plain ``string`` or ``double`` say nothing more in the schema, so their columns
are typed as written: ``decimal.handling.mode=string`` gives ``string`` columns (every digit;
``"NAN"``, ``"POSITIVE_INFINITY"``), ``double`` gives ``double``, and ``binary.handling.mode``
``base64``/``hex`` give ``string`` columns holding the encoded text (only ``bytes``, the default,
says "binary"). Connect's ``Timestamp`` holds a column without time zone as if its wall clock were
UTC, so it is ``timestamp_ntz``.

**Values Debezium could not capture.** For a TOASTed column an UPDATE left unchanged (PostgreSQL
with ``REPLICA IDENTITY DEFAULT``) Debezium writes a placeholder for the value it does not have
(``#postgresql-toasted-values``; ``unavailable.value.placeholder``, default
``__debezium_unavailable_value``), in a form that depends on the column's type. Debezium 3.6.1
writes (``UnchangedToastedPlaceholder``): the text for text, ``json``/``jsonb``, enums and
``bytea`` under ``binary.handling.mode=hex``; the text's bytes (base64) for ``bytea`` under
``bytes``; ``[text]`` for arrays of text, JSON and ``bytea`` (``[bytes]``); the UUID
``nameUUIDFromBytes(text)`` in an array for ``uuid[]``; one number per byte of the text
(``[95,95,100,...]``) for ``integer[]``, ``bigint[]`` and ``date[]``; ``{text: text}`` for
``hstore``. Newer releases may also declare the form in the field's schema (parameter
``__debezium.unavailable.value.placeholder``, ``UnavailableValuePlaceholderParameter``); a
declared form is used instead. A value in such a form is no data: the column is left out of the
image, so the image reads as "not given" there and a mirror keeps the value it stored. (The native
decoder already leaves out the text, base64 and one-element forms of the default placeholder for
every image; this covers every form above, for typed images.) Under ``binary.handling.mode=base64``
Debezium 3.6.1 writes ``null`` for such a ``bytea``: the value is lost at the producer, and a
mirror stores that null.

Pure; runs on executors: schemas once per distinct schema (cached), images per row.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

import pyarrow as pa

from spark_ckpt.errors import ChangeDecodeError

from ..schema import with_types

__all__ = ["PLACEHOLDER", "ImageTypes", "field_type", "image_fields", "image_types", "typed_batch"]

PLACEHOLDER = "__debezium_unavailable_value"
"""Debezium's default ``unavailable.value.placeholder``."""

_PLACEHOLDER_BYTES = PLACEHOLDER.encode()
_PLACEHOLDER_BASE64 = base64.b64encode(_PLACEHOLDER_BYTES).decode()
# java.util.UUID.nameUUIDFromBytes: the MD5 of the bytes as a version 3 UUID.
_PLACEHOLDER_UUID = str(uuid.UUID(bytes=hashlib.md5(_PLACEHOLDER_BYTES).digest(), version=3))
_DECLARED = "__debezium.unavailable.value.placeholder"
# Where none of these occur in an image's text, no column of it holds a default placeholder in
# a text form; the numeric-array form is looked for apart (_BYTE_LIST), whitespace allowed.
_SCREEN = re.compile(
    "|".join(re.escape(s) for s in (PLACEHOLDER, _PLACEHOLDER_BASE64[:36], _PLACEHOLDER_UUID))
)
_BYTE_LIST = re.compile(r"\[\s*95(?:\.0)?\s*,\s*95(?:\.0)?\s*,\s*100(?:\.0)?\s*,")

_PRIMITIVE = {
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    # Kafka Connect's JsonConverter names them "float" and "double" (Connect's FLOAT32 and
    # FLOAT64); the enum names are accepted too.
    "float": "float",
    "double": "double",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "binary",
}
_INTEGERS = ("int8", "int16", "int32", "int64")
_NUMBERS = (*_INTEGERS, "float", "double", "float32", "float64")
_CONNECT = "org.apache.kafka.connect.data."
_DEBEZIUM_TIME = "io.debezium.time."
_DECIMAL = _CONNECT + "Decimal"
_VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
_UUID = "io.debezium.data.Uuid"
_DATES = (_DEBEZIUM_TIME + "Date", _CONNECT + "Date")
# Units per second of the times of day.
_CLOCKS = {
    _DEBEZIUM_TIME + "Time": 1_000,
    _DEBEZIUM_TIME + "MicroTime": 1_000_000,
    _DEBEZIUM_TIME + "NanoTime": 1_000_000_000,
    _CONNECT + "Time": 1_000,
}
# Factor to microseconds of the timestamps without time zone (negative: a divisor).
_NAIVE = {
    _DEBEZIUM_TIME + "Timestamp": 1000,
    _DEBEZIUM_TIME + "MicroTimestamp": 1,
    _DEBEZIUM_TIME + "NanoTimestamp": -1000,
    _CONNECT + "Timestamp": 1000,
}
Normalizer = Callable[[Any], Any]
Matcher = Callable[[Any], bool]


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _digits(unscaled: int, scale: int) -> str:
    # Exact: the constructor does not round (Decimal.scaleb rounds to 28 digits), and "f"
    # never switches to an exponent (str(Decimal("1E-7")) is "1E-7").
    return format(Decimal(f"{unscaled}E{-scale}"), "f")


def _unscaled(text: Any) -> int:
    if not isinstance(text, str):
        raise ValueError("not base64 text")
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise ValueError("not base64") from e
    return int.from_bytes(raw, "big", signed=True)


def _decimal(scale: int) -> Normalizer:
    def normalize(value: Any) -> str:
        if isinstance(value, str):  # Connect's bytes: the unscaled value, big-endian, base64
            return _digits(_unscaled(value), scale)
        if _is_integer(value) or isinstance(value, Decimal):  # JsonConverter decimal.format=NUMERIC
            return format(Decimal(value), "f")
        raise ValueError("neither base64 nor a number")

    return normalize


def _variable_decimal(value: Any) -> str:
    if not isinstance(value, dict) or not _is_integer(value.get("scale")):
        raise ValueError('not {"scale": int, "value": base64}')
    return _digits(_unscaled(value.get("value")), int(value["scale"]))


def _clock(per_second: int) -> Normalizer:
    width = len(str(per_second)) - 1

    def normalize(value: Any) -> str:
        if not _is_integer(value) or value < 0:
            raise ValueError("not a count of units since midnight")
        seconds, fraction = divmod(value, per_second)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)  # 24:00:00 stays 24:00:00, as PostgreSQL allows
        text = f"{hour:02d}:{minute:02d}:{second:02d}"
        if fraction:
            text += "." + f"{fraction:0{width}d}".rstrip("0")
        return text

    return normalize


def _iso_time(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not ISO text")
    text = value.removesuffix("Z")
    whole, dot, fraction = text.partition(".")
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}" if dot and fraction else whole


def _without_z(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not ISO text")
    return value.removesuffix("Z")


def _scaled(factor: int) -> Normalizer:
    def normalize(value: Any) -> int:
        if not _is_integer(value):
            raise ValueError("not an integer")
        return int(value * factor if factor > 0 else value // -factor)

    return normalize


def _each(element: Normalizer) -> Normalizer:
    def normalize(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise ValueError("not an array")
        return [None if v is None else element(v) for v in value]

    return normalize


def field_type(schema: Mapping[str, Any]) -> tuple[str, Normalizer | None]:
    """One field's Spark SQL type and the rewrite its values need (None: none).

    Runs on executors (once per distinct schema) and on the driver (once per schema change).
    """
    name = schema.get("name")
    kind = schema.get("type")
    parameters = schema.get("parameters") or {}
    if name == _DECIMAL:
        scale = int(parameters.get("scale", 0))
        precision = int(parameters.get("connect.decimal.precision", 38))
        # PostgreSQL 15 allows a negative scale (numeric(5,-2)) and a scale above the
        # precision (numeric(2,5)); Spark wants 0 <= scale <= precision <= 38.
        spark_precision, spark_scale = max(precision - min(scale, 0), scale), max(scale, 0)
        if not 0 < spark_precision <= 38:
            return "string", _decimal(scale)
        return f"decimal({spark_precision},{spark_scale})", _decimal(scale)
    if name == _VARIABLE_DECIMAL:
        return "string", _variable_decimal
    if name in _DATES:
        return "date", None
    if name == _DEBEZIUM_TIME + "IsoDate":
        return "date", _without_z
    if name in _CLOCKS:
        return "string", _clock(_CLOCKS[name])
    if name == _DEBEZIUM_TIME + "IsoTime":
        return "string", _iso_time
    if name in _NAIVE:
        factor = _NAIVE[name]
        return "timestamp_ntz", None if factor == 1 else _scaled(factor)
    if name == _DEBEZIUM_TIME + "IsoTimestamp":
        return "timestamp_ntz", _without_z
    if name == _DEBEZIUM_TIME + "ZonedTimestamp":
        return "timestamp", None
    if kind == "array" and isinstance(schema.get("items"), dict):
        element, rewrite = field_type(schema["items"])
        return f"array<{element}>", None if rewrite is None else _each(rewrite)
    if isinstance(kind, str) and kind in _PRIMITIVE:
        return _PRIMITIVE[kind], None
    return "string", None


# -- the unavailable-value placeholder -----------------------------------------------------------


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _canonical(schema: Mapping[str, Any], value: Any, nested: bool = False) -> str | None:
    """``UnavailableValuePlaceholderParameter.serialize`` of a value as JsonConverter wrote it."""
    kind = schema.get("type")
    if value is None:
        return None
    if kind in ("string", "bytes"):  # JsonConverter writes bytes as base64, as serialize does
        if not isinstance(value, str):
            return None
        return _quote(value) if nested else value
    if kind in ("int32", "int64"):
        return str(value) if _is_integer(value) else None
    if kind == "array" and isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = [_canonical(schema["items"], v, nested=True) for v in value]
        return None if None in items else "[" + ",".join(str(i) for i in items) + "]"
    if kind == "map" and isinstance(value, dict):  # string keys: JsonConverter writes an object
        keys, values = schema.get("keys") or {}, schema.get("values") or {}
        pairs = [
            (_canonical(keys, k, nested=True), _canonical(values, v, nested=True))
            for k, v in value.items()
        ]
        if any(k is None or v is None for k, v in pairs):
            return None
        return "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}"
    return None


def _default_forms(schema: Mapping[str, Any]) -> list[Any]:
    """The JSON values the default placeholder takes in a field of ``schema`` (Debezium 3.6.1)."""
    kind, name = schema.get("type"), schema.get("name")
    if kind == "string":
        return [PLACEHOLDER]
    if kind == "bytes" and name != _DECIMAL:
        return [_PLACEHOLDER_BASE64]
    if kind == "map":
        return [{PLACEHOLDER: PLACEHOLDER}]
    items = schema.get("items")
    if kind != "array" or not isinstance(items, dict):
        return []
    if items.get("type") == "string":
        return (
            [[PLACEHOLDER], [_PLACEHOLDER_UUID]] if items.get("name") == _UUID else [[PLACEHOLDER]]
        )
    if items.get("type") == "bytes" and items.get("name") != _DECIMAL:
        return [[_PLACEHOLDER_BASE64]]
    if items.get("type") in _NUMBERS:
        return [list(_PLACEHOLDER_BYTES)]
    return []


def _unavailable(schema: Mapping[str, Any]) -> tuple[Matcher | None, str]:
    """Whether a value of the field is the placeholder, and how a row's text is screened for it.

    How: ``"text"`` (:data:`_SCREEN` finds every such form), ``"bytes"`` (one number per byte:
    :data:`_BYTE_LIST`), ``"always"`` (a declared form: every row is looked at), ``""`` (none).
    """
    declared = (schema.get("parameters") or {}).get(_DECLARED)
    if isinstance(declared, str):
        return (lambda value: _canonical(schema, value) == declared), "always"
    forms = _default_forms(schema)
    if not forms:
        return None, ""

    def matches(value: Any) -> bool:
        # list == list compares element-wise (95 == 95.0); no form holds a bool
        return any(value == form for form in forms)

    numeric = any(isinstance(f, list) and f and isinstance(f[0], int) for f in forms)
    return matches, "bytes" if numeric else "text"


@dataclass(frozen=True)
class _Column:
    kind: str
    rewrite: Normalizer | None
    unavailable: Matcher | None
    schema_name: str | None


class ImageTypes:
    """A row image's column types, the value rewrites they need, and their placeholders.

    Built on executors, once per distinct field list (:func:`image_types` caches it).

    Attributes
    ----------
    types_json
        The ``column_types`` text.
    """

    def __init__(self, fields: list[Mapping[str, Any]]) -> None:
        columns: dict[str, _Column] = {}
        screens: set[str] = set()
        for field in fields:
            if "field" not in field:
                continue
            kind, rewrite = field_type(field)
            unavailable, screen = _unavailable(field)
            screens.add(screen)
            name = field.get("name")
            columns[str(field["field"])] = _Column(
                kind, rewrite, unavailable, name if isinstance(name, str) else None
            )
        self._columns = {n: c for n, c in columns.items() if c.rewrite or c.unavailable}
        self.types_json = json.dumps(
            {name: column.kind for name, column in columns.items()}, separators=(",", ":")
        )
        rewrites = any(c.rewrite is not None for c in columns.values())
        self._always = rewrites or "always" in screens
        self._text = "text" in screens
        self._bytes = "bytes" in screens

    def needs_rewriting(self, text: str) -> bool:
        """Whether the image ``text`` may change under :meth:`normalize` (a cheap look)."""
        if self._always:
            return True
        return bool(
            (self._text and _SCREEN.search(text)) or (self._bytes and _BYTE_LIST.search(text))
        )

    def normalize(self, image: Any) -> Any:
        """``image`` with placeholders left out and encoded values rewritten (a new dict).

        None, and anything that is not an object, is returned as it is.

        Raises
        ------
        ChangeDecodeError
            A value that does not have the form its schema says (names the column and schema).
        """
        if not isinstance(image, dict) or not self._columns:
            return image
        out = dict(image)
        for name, column in self._columns.items():
            value = out.get(name)
            if value is None:
                continue
            if column.unavailable is not None and column.unavailable(value):
                del out[name]  # not given: the image does not say what the column holds
                continue
            if column.rewrite is not None:
                try:
                    out[name] = column.rewrite(value)
                except (ValueError, InvalidOperation) as e:
                    raise ChangeDecodeError(
                        f"column {name!r} ({column.schema_name or column.kind}): the value "
                        f"{json.dumps(value, default=str)[:80]} does not have the form its "
                        f"Kafka Connect schema says ({e}). The line's envelope and value "
                        f"disagree; read this log with columnTypes=false to see it as written"
                    ) from e
        return out


@lru_cache(maxsize=256)
def _cached(fields_text: str) -> ImageTypes:
    return ImageTypes(json.loads(fields_text))


def image_fields(schema: Any) -> list[Any] | None:
    """The fields of the ``after`` (else ``before``) struct of an envelope's ``schema``, or None.

    One per column, in the table's order (Kafka Connect field schemas).
    """
    if not isinstance(schema, dict):
        return None
    for wanted in ("after", "before"):
        for part in schema.get("fields") or []:
            if isinstance(part, dict) and part.get("field") == wanted:
                fields = part.get("fields")
                if isinstance(fields, list):
                    return fields
    return None


def image_types(schema: Any) -> ImageTypes | None:
    """The types of the ``after`` (else ``before``) image of an envelope's ``schema``, or None."""
    fields = image_fields(schema)
    return None if fields is None else _cached(json.dumps(fields, sort_keys=True))


@lru_cache(maxsize=256)
def _types_of_text(schema_text: str) -> ImageTypes | None:
    return image_types(json.loads(schema_text))


def _number(value: object) -> float:
    # json.dumps's fallback: numbers parsed as Decimal that no rewrite consumed.
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _rewritten(text: str, types: ImageTypes) -> str:
    # Fractions parse as Decimal so a decimal written as a JSON number keeps every digit; the
    # others are written back as the floats they were.
    image = types.normalize(json.loads(text, parse_float=Decimal))
    return json.dumps(image, separators=(",", ":"), ensure_ascii=False, default=_number)


def typed_batch(rows: pa.StructArray) -> pa.RecordBatch:
    """Output rows with the ``column_types`` column, from rows that carry their ``schema`` text.

    Runs on executors, per record batch, only with ``columnTypes=true``: ``rows`` holds the
    output columns and then ``schema`` (the envelope's schema, or null). ``before`` and
    ``after`` are rewritten where the types need it (:class:`ImageTypes`).

    Raises
    ------
    ChangeDecodeError
        A value that does not have the form its schema says.
    """
    columns = rows.flatten()
    schemas = columns[-1].to_pylist()
    described = [None if text is None else _types_of_text(text) for text in schemas]
    names = [field.name for field in rows.type]
    images: dict[str, pa.Array] = {}
    if any(d is not None for d in described):
        for name in ("before", "after"):
            texts = columns[names.index(name)].to_pylist()
            if not any(
                d is not None and text is not None and d.needs_rewriting(text)
                for text, d in zip(texts, described, strict=True)
            ):
                continue
            images[name] = pa.array(
                [
                    _rewritten(text, d)
                    if d is not None and text is not None and d.needs_rewriting(text)
                    else text
                    for text, d in zip(texts, described, strict=True)
                ],
                pa.string(),
            )
    output = pa.RecordBatch.from_arrays(
        [images.get(name, column) for name, column in zip(names[:-1], columns[:-1], strict=True)],
        names=names[:-1],
    )
    types = pa.array([None if d is None else d.types_json for d in described], pa.string())
    return with_types(output, types)
