"""PostgreSQL column types -> the Spark SQL types of the ``column_types`` column.

With ``columnTypes=true`` every change row says what its image's columns are, so a mirror
(``delta-2pc`` ``mode=mirror``) gets its source table's types instead of inferring them from JSON.
Types arrive as ``format_type`` spells them (wal2json's ``include-types``; the catalog for the
snapshot) and map as follows:

==============================================  ===========================================
PostgreSQL                                      Spark SQL
==============================================  ===========================================
``smallint``, ``integer``, ``bigint``, ``oid``  ``smallint``, ``int``, ``bigint``, ``bigint``
``real``, ``double precision``                  ``float``, ``double`` (NaN and infinities kept)
``numeric(p,s)``, p <= 38                       ``decimal(p,s)``
``numeric`` without precision, or p > 38        ``string`` (every digit, NaN and infinities)
``boolean``                                     ``boolean``
``date``                                        ``date``
``timestamp with time zone``                    ``timestamp``
``timestamp without time zone``                 ``timestamp_ntz``
``bytea``                                       ``binary``
``T[]`` (one dimension)                         ``array<T's type>``
text types, ``json``, ``jsonb``, ``uuid``,      ``string`` (PostgreSQL's text form)
``time``, ``interval``, enums, anything else
==============================================  ===========================================

Pure; runs on executors (per distinct column list) and on the driver (snapshot).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import lru_cache

__all__ = ["spark_type", "types_json"]

_EXACT = {
    "smallint": "smallint",
    "integer": "int",
    "bigint": "bigint",
    "oid": "bigint",
    "real": "float",
    "double precision": "double",
    "boolean": "boolean",
    "date": "date",
    "bytea": "binary",
}
_NUMERIC = re.compile(r"^(?:numeric|decimal)\((\d+),(\d+)\)$")
_PRECISION = re.compile(r"\(\d+\)")


@lru_cache(maxsize=1024)
def spark_type(pg_type: str) -> str:
    """The Spark SQL type a column of PostgreSQL type ``pg_type`` is mirrored as."""
    name = pg_type.strip()
    if name.endswith("[]"):
        return f"array<{spark_type(name[:-2])}>"
    if name in _EXACT:
        return _EXACT[name]
    numeric = _NUMERIC.match(name.replace(" ", ""))
    if numeric:
        precision, scale = int(numeric.group(1)), int(numeric.group(2))
        return f"decimal({precision},{scale})" if precision <= 38 else "string"
    bare = _PRECISION.sub("", name)  # timestamp(3) with time zone -> timestamp with time zone
    if bare == "timestamp with time zone":
        return "timestamp"
    if bare == "timestamp without time zone":
        return "timestamp_ntz"
    return "string"


def types_json(columns: Iterable[tuple[str, str]]) -> str:
    """``column_types`` text for ``(name, PostgreSQL type)`` pairs in column order."""
    return json.dumps(
        {name: spark_type(pg_type) for name, pg_type in columns},
        separators=(",", ":"),
        ensure_ascii=False,
    )
