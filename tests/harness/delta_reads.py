"""Reading Delta tables back in tests and benchmarks, deletion vectors applied (delta-rs).

delta-rs's ``DeltaTable.to_pyarrow_table``, ``to_pandas`` and ``to_pyarrow_dataset`` refuse a
table with the ``deletionVectors`` reader feature, which every mirror table the sink creates has;
its ``QueryBuilder`` (DataFusion) applies them. The result is cast to the table's own Arrow
schema, since DataFusion returns some types in other layouts (string views).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

__all__ = ["count_delta", "read_delta"]


def read_delta(
    uri: str,
    version: int | None = None,
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The live rows of the Delta table at ``uri`` (at ``version``; ``columns`` or all)."""
    table = DeltaTable(
        uri,
        version=version,
        storage_options=None if storage_options is None else dict(storage_options),
    )
    schema = pa.schema(table.schema().to_arrow())
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    select = ", ".join('"' + f.name.replace('"', '""') + '"' for f in schema)
    reader = QueryBuilder().register("t", table).execute(f"SELECT {select} FROM t")
    rows = pa.table(reader.read_all())
    return pa.Table.from_arrays(
        [rows.column(i).cast(f.type) for i, f in enumerate(schema)], schema=schema
    )


def count_delta(uri: str, where: str = "true") -> int:
    """How many live rows of the Delta table at ``uri`` satisfy ``where`` (SQL; 0: no table yet).

    For the waits that poll a table while a query writes it: read in this process (delta-rs's
    DataFusion), not by a Spark job in the session the query runs in (0.25-0.7 s of its CPU a
    poll, measured).
    """
    try:
        table = DeltaTable(uri)
    except TableNotFoundError:
        return 0
    query = f"SELECT count(*) AS n FROM t WHERE {where}"
    return int(QueryBuilder().register("t", table).execute(query).read_all().column("n")[0].as_py())
