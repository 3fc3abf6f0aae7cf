"""Seconds to apply a batch's changes to one file of 1M rows: deletion vector vs rewriting it.

One Delta table per method, each one Parquet file of ``--rows`` rows (``id`` and three text
columns, as bench/mirror_apply.py's items), written by delta-rs; then ``--batches`` batches each
changing ``--changed`` random existing keys (new versions of those rows):

- **rewrite** (the mirror's copy-on-write today): read the file whole, drop the changed rows,
  write the file anew with the new versions, commit remove + add with delta-rs;
- **dv** (merge-on-read): write the new versions to a small new file, mark the old rows in the
  file's deletion vector (merged with the earlier batches'), commit remove + add with the DV.

Both first find the changed rows' positions by reading the key column alone (timed apart as
``locate_s``: a key index would remove it). Also times one full read of each table by delta-rs
(``QueryBuilder``) after the batches: what merge-on-read costs its readers. Prints one JSON line.
Run: ``.venv/bin/python bench/deletion_vector_apply.py [--rows 1000000] [--changed 1000]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, QueryBuilder, Schema, write_deltalake

from spark_ckpt.sinks.mirror.deletion_vectors import DeletedRows
from spark_ckpt.sinks.mirror.dv_commit import (
    DeletionCommit,
    commit_deletions,
    enable_deletion_vectors,
)
from spark_ckpt.sinks.staging import staged_location, write_staged_file
from spark_ckpt.sinks.table import BatchCommit, commit_files
from spark_ckpt.state.storage import Location

QUERY = "bench-deletion-vectors"


def items(ids: np.ndarray, version: int) -> pa.Table:
    text = pa.array([f"v{version}-{i}" for i in ids.tolist()])
    return pa.table({"id": pa.array(ids, pa.int64()), "amount": text, "sku": text, "note": text})


def only_file(table: Location) -> str:
    (uri,) = DeltaTable(table.url).file_uris()
    return uri.rsplit("/", 1)[-1]


def locate(table: Location, path: str, keys: np.ndarray) -> np.ndarray:
    """Positions of ``keys`` in the file, from its key column alone."""
    column = staged_location(table, path).read_parquet(["id"]).column("id")
    return np.flatnonzero(pc.is_in(column, value_set=pa.array(keys)).to_numpy(False))


def rewrite(table: Location, keys: np.ndarray, batch: int) -> None:
    path = only_file(table)
    rows = staged_location(table, path).read_parquet()
    kept = rows.filter(pc.invert(pc.is_in(rows.column("id"), value_set=pa.array(keys))))
    new = write_staged_file(
        table, f"part-rewrite-{batch}.parquet", pa.concat_tables([kept, items(keys, batch)])
    )
    delta = DeltaTable(table.url)
    schema = Schema.from_arrow(rows.schema)
    commit_files(table, delta, BatchCommit(QUERY, batch, schema, [new], removes=[path]))


def dv(table: Location, path: str, keys: np.ndarray, positions: np.ndarray, batch: int) -> int:
    new = write_staged_file(table, f"part-dv-{batch}.parquet", items(keys, batch))
    deleted = DeletedRows.from_indexes(positions)
    commit_deletions(
        table, DeltaTable(table.url), DeletionCommit(QUERY, batch, {path: deleted}, [new])
    )
    return len(deleted.serialize())


def read_all(table: Location) -> float:
    start = time.perf_counter()
    query = QueryBuilder().register("t", DeltaTable(table.url)).execute("SELECT * FROM t")
    rows = pa.table(query.read_all()).num_rows
    assert rows > 0
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--changed", type=int, default=1000, help="keys changed per batch")
    parser.add_argument("--batches", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory(prefix="dv-bench-") as tmp:
        tables = {name: Location(str(Path(tmp) / name)) for name in ("rewrite", "dv")}
        for table in tables.values():
            write_deltalake(table.url, items(np.arange(args.rows), 0))
        enable_deletion_vectors(DeltaTable(tables["dv"].url))
        file_bytes = DeltaTable(tables["dv"].url).get_add_actions().column("size_bytes")[0]
        dv_path = only_file(tables["dv"])
        seconds: dict[str, list[float]] = {"rewrite": [], "dv": [], "locate": []}
        dv_bytes = 0
        for batch in range(1, args.batches + 1):
            # Keys never changed before, so every one is still in the original file.
            keys = rng.choice(args.rows, args.changed * args.batches, replace=False)[
                (batch - 1) * args.changed : batch * args.changed
            ]
            start = time.perf_counter()
            positions = locate(tables["dv"], dv_path, keys)
            seconds["locate"].append(time.perf_counter() - start)
            start = time.perf_counter()
            dv_bytes = dv(tables["dv"], dv_path, keys, positions, batch)
            seconds["dv"].append(time.perf_counter() - start)
            start = time.perf_counter()
            rewrite(tables["rewrite"], keys, batch)
            seconds["rewrite"].append(time.perf_counter() - start)
        reads = {name: read_all(table) for name, table in tables.items()}
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(
        json.dumps(
            {
                "bench": "deletion_vector_apply",
                "rows": args.rows,
                "changed_per_batch": args.changed,
                "batches": args.batches,
                "file_bytes": int(file_bytes.as_py()),
                "rewrite_s": round(median["rewrite"], 3),
                "dv_s": round(median["dv"], 3),
                "locate_s": round(median["locate"], 3),
                "speedup": round(median["rewrite"] / median["dv"], 1),
                "dv_bytes_after": dv_bytes,
                "read_after_rewrite_s": round(reads["rewrite"], 3),
                "read_after_dv_s": round(reads["dv"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
