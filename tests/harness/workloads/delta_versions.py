"""What each Delta version of a table added, read with delta-rs (no JVM).

The ``delta-2pc`` sink's change log only ever adds files, so what Delta version ``v`` shows is
the rows of the files versions ``0..v`` added. Reading every version's files once this way costs
one Parquet read per file; reading every version with delta-spark's time travel costs a Spark
job per version (about 2 s each here, most of a crash test's verification). A version that
removed a file fails the read, since "the version that added it" would then not say what each
version showed. Tables on object stores are reached through the storage layer (the sink's own
``load_table``, and ``Location.read_parquet`` for the files).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["added_rows", "rows_by_version"]


def rows_by_version(
    table: str | os.PathLike[str],
    storage: Mapping[str, str] | None = None,
    columns: Sequence[str] | None = None,
) -> list[list[dict[str, Any]]]:
    """The rows (``columns`` of them, or all) each version added, indexed by version.

    One entry per version of the table, empty for a version that added no file.

    Raises
    ------
    AssertionError
        If there is no table, or a version removed a file.
    """
    from spark_ckpt.sinks.table import load_table
    from spark_ckpt.state.storage import Location, StorageOptions

    location = Location(os.fspath(table), StorageOptions.of(dict(storage or {})))
    delta = load_table(location)
    assert delta is not None, f"no Delta table at {location}"
    seen: set[str] = set()
    by_version: list[list[dict[str, Any]]] = []
    for version in range(delta.version() + 1):
        delta.load_as_version(version)
        files = set(delta.file_uris())
        assert seen <= files, f"Delta version {version} removed {sorted(seen - files)}"
        by_version.append(
            [
                row
                for uri in sorted(files - seen)
                for row in Location(uri, location.options).read_parquet(columns).to_pylist()
            ]
        )
        seen = files
    return by_version


def added_rows(
    table: str | os.PathLike[str],
    storage: Mapping[str, str] | None = None,
    columns: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Every row of ``table`` (``columns`` of it, or all), each with ``version``.

    ``version`` is the version that added the row's file (see :func:`rows_by_version`).
    """
    return [
        {**row, "version": version}
        for version, rows in enumerate(rows_by_version(table, storage, columns))
        for row in rows
    ]
