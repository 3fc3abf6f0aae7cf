"""Each row of a Delta table with the version that added it, read with delta-rs (no JVM).

The ``delta-2pc`` sink's change log only ever adds files, so what Delta version ``v`` shows is
the rows of the files versions ``0..v`` added. Reading every version's files once this way costs
one Parquet read per file; reading every version with delta-spark's time travel costs a Spark
job per version (about 2 s each here, most of a crash test's verification). A version that
removed a file fails the read, since "the version that added it" would then not say what each
version showed. Tables on object stores are reached through the storage layer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["added_rows", "version_count"]


def _open(table: str | os.PathLike[str], storage: Mapping[str, str] | None) -> Any:
    from deltalake import DeltaTable

    from spark_ckpt.state.storage import Location, StorageOptions

    location = Location(os.fspath(table), StorageOptions.of(dict(storage or {})))
    return DeltaTable(location.url, storage_options=location.delta_options())


def version_count(table: str | os.PathLike[str], storage: Mapping[str, str] | None = None) -> int:
    """How many versions ``table`` has (its newest version + 1)."""
    return int(_open(table, storage).version()) + 1


def added_rows(
    table: str | os.PathLike[str],
    storage: Mapping[str, str] | None = None,
    columns: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Every row of ``table`` (``columns`` of it, or all), each with ``version``.

    Raises
    ------
    AssertionError
        If a version removed a file.
    """
    from spark_ckpt.state.storage import Location, StorageOptions

    options = StorageOptions.of(dict(storage or {}))
    delta = _open(table, storage)
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    for version in range(delta.version() + 1):
        delta.load_as_version(version)
        files = set(delta.file_uris())
        assert seen <= files, f"Delta version {version} removed {sorted(seen - files)}"
        for uri in sorted(files - seen):
            for row in Location(uri, options).read_parquet(columns).to_pylist():
                row["version"] = version
                rows.append(row)
        seen = files
    return rows
