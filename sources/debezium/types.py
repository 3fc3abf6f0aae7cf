"""Column types from Kafka Connect's JSON envelope (``{"schema": ..., "payload": ...}``).

With ``columnTypes=true``, a change event written with ``schemas.enable=true`` says what its row
images hold; they map to the Spark SQL types of the ``column_types`` column, and the values whose
JSON form is an encoding are rewritten to the form the type's readers take:

==========================================================  ====================================
Kafka Connect schema (``type`` / ``name``)                  Spark SQL type, value
==========================================================  ====================================
``int8``, ``int16``, ``int32``, ``int64``                   ``tinyint`` .. ``bigint``
``float``, ``double``, ``boolean``, ``string``               ``float``, ``double``, ``boolean``,
                                                            ``string``
``bytes``                                                   ``binary`` (base64, as written)
``org.apache.kafka.connect.data.Decimal`` (``scale``,       ``decimal(p,s)`` (p from
``connect.decimal.precision``)                              ``connect.decimal.precision``, else
                                                            38); base64 -> the decimal's digits
``io.debezium.time.Date``, ``...connect.data.Date``         ``date`` (days since the epoch)
``io.debezium.time.Timestamp`` / ``MicroTimestamp`` /       ``timestamp_ntz``; milliseconds and
``NanoTimestamp``                                           nanoseconds -> microseconds
``org.apache.kafka.connect.data.Timestamp``                 ``timestamp`` (milliseconds ->
                                                            microseconds since the epoch)
``io.debezium.time.ZonedTimestamp``                         ``timestamp`` (ISO text, as written)
``array`` of T                                              ``array<T's type>``
anything else (``struct``, ``map``, times of day, JSON)     ``string`` (JSON text)
==========================================================  ====================================

Pure; runs on executors, once per distinct schema (cached).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from decimal import Decimal
from functools import lru_cache
from typing import Any

import pyarrow as pa

from ..schema import json_text, with_types

__all__ = ["ImageTypes", "image_types", "typed_batch"]

# Kafka Connect's JsonConverter names its types as in its JsonSchema: "float" and "double"
# (Connect's FLOAT32 and FLOAT64); the enum names are accepted too.
_PRIMITIVE = {
    "int8": "tinyint",
    "int16": "smallint",
    "int32": "int",
    "int64": "bigint",
    "float": "float",
    "double": "double",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "binary",
}
_DATES = ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date")
_NAIVE = {
    "io.debezium.time.Timestamp": 1000,
    "io.debezium.time.MicroTimestamp": 1,
    "io.debezium.time.NanoTimestamp": -1000,
}
Normalizer = Callable[[Any], Any]


def _decimal(scale: int) -> Normalizer:
    def normalize(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        return str(Decimal(unscaled).scaleb(-scale))

    return normalize


def _scaled(factor: int) -> Normalizer:
    def normalize(value: Any) -> Any:
        if not isinstance(value, int):
            return value
        return value * factor if factor > 0 else value // -factor

    return normalize


def _field(schema: Mapping[str, Any]) -> tuple[str, Normalizer | None]:
    """One field's Spark SQL type and the rewrite its values need (None: none)."""
    name = schema.get("name")
    kind = schema.get("type")
    parameters = schema.get("parameters") or {}
    if name == "org.apache.kafka.connect.data.Decimal":
        scale = int(parameters.get("scale", 0))
        precision = int(parameters.get("connect.decimal.precision", 38))
        if precision > 38:
            return "string", _decimal(scale)
        return f"decimal({precision},{scale})", _decimal(scale)
    if name in _DATES:
        return "date", None
    if name in _NAIVE:
        factor = _NAIVE[name]
        return "timestamp_ntz", None if factor == 1 else _scaled(factor)
    if name == "org.apache.kafka.connect.data.Timestamp":
        return "timestamp", _scaled(1000)
    if name == "io.debezium.time.ZonedTimestamp":
        return "timestamp", None
    if kind == "array" and isinstance(schema.get("items"), dict):
        element, normalize = _field(schema["items"])
        if normalize is None:
            return f"array<{element}>", None
        inner = normalize

        def each(value: Any) -> Any:
            return (
                [None if v is None else inner(v) for v in value]
                if isinstance(value, list)
                else value
            )

        return f"array<{element}>", each
    if isinstance(kind, str) and kind in _PRIMITIVE:
        return _PRIMITIVE[kind], None
    return "string", None


class ImageTypes:
    """A row image's column types and the value rewrites they need.

    Attributes
    ----------
    types_json
        The ``column_types`` text.
    """

    def __init__(self, fields: list[Mapping[str, Any]]) -> None:
        described = {str(f["field"]): _field(f) for f in fields if "field" in f}
        self.types_json = json.dumps(
            {name: kind for name, (kind, _) in described.items()}, separators=(",", ":")
        )
        self._rewrites = {name: fn for name, (_, fn) in described.items() if fn is not None}

    @property
    def rewrites(self) -> bool:
        """Whether any value of an image needs rewriting."""
        return bool(self._rewrites)

    def normalize(self, image: Any) -> Any:
        """``image`` with encoded values rewritten (a new dict; None stays None)."""
        if not isinstance(image, dict) or not self._rewrites:
            return image
        out = dict(image)
        for name, rewrite in self._rewrites.items():
            if out.get(name) is not None:
                out[name] = rewrite(out[name])
        return out


@lru_cache(maxsize=256)
def _cached(fields_text: str) -> ImageTypes:
    return ImageTypes(json.loads(fields_text))


def image_types(schema: Any) -> ImageTypes | None:
    """The types of the ``after`` (else ``before``) image of an envelope's ``schema``, or None."""
    if not isinstance(schema, dict):
        return None
    for wanted in ("after", "before"):
        for part in schema.get("fields") or []:
            if isinstance(part, dict) and part.get("field") == wanted:
                fields = part.get("fields")
                if isinstance(fields, list):
                    return _cached(json.dumps(fields, sort_keys=True))
    return None


@lru_cache(maxsize=256)
def _types_of_text(schema_text: str) -> ImageTypes | None:
    return image_types(json.loads(schema_text))


def typed_batch(rows: pa.StructArray) -> pa.RecordBatch:
    """Output rows with the ``column_types`` column, from rows that carry their ``schema`` text.

    Runs on executors, per record batch, only with ``columnTypes=true``: ``rows`` holds the
    output columns and then ``schema`` (the envelope's schema, or null). ``before`` and
    ``after`` are rewritten where the types need it (:class:`ImageTypes`).
    """
    columns = rows.flatten()
    schemas = columns[-1].to_pylist()
    described = [None if text is None else _types_of_text(text) for text in schemas]
    names = [field.name for field in rows.type]
    images: dict[str, pa.Array] = {}
    if any(d is not None and d.rewrites for d in described):
        for name in ("before", "after"):
            texts = columns[names.index(name)].to_pylist()
            images[name] = pa.array(
                [
                    text
                    if d is None or text is None or not d.rewrites
                    else json_text(d.normalize(json.loads(text)))
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
