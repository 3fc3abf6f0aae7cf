"""What a deletion vector costs a full read: one file against several, with and without DVs.

The same ``--rows`` rows (the mirror benches' columns) are written four times with delta-rs: in
one file and in ``--files`` files, each plain and with a DV (written as the mirror's apply writes
them, ``commit_deletions``) deleting ``--deleted`` of every file's rows. Each table is read whole
(delta-rs ``QueryBuilder``, every column, DVs applied) ``--scans`` times, interleaved; the medians
and their ratios to the plain one-file table are printed as one JSON line.

A DV on a large file costs about one more read of it (``bench/mirror_compaction.py``). This
bench tells why: if the DV's cost were its bitmap, more files would not change it; if it is the
reader giving up its parallel scan, a DV makes the table read as one stream whatever its files.
delta-rs reads a table with DVs in one partition, whole files in physical order (delta-rs pull
request 4692, "fix: preserve row order in deletion vector scans": "It locks scans to whole file
groups and requires a single input partition"). Run: ``.venv/bin/python
bench/deletion_vector_scan.py [--rows 2000000] [--files 8]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from mirror_compaction import scan, value

from spark_ckpt.sinks.mirror.deletion_vectors import DeletedRows
from spark_ckpt.sinks.mirror.dv_commit import (
    DeletionCommit,
    commit_deletions,
    enable_deletion_vectors,
)
from spark_ckpt.state.storage import Location


def rows_between(low: int, high: int) -> pa.Table:
    """Rows ``low`` to ``high`` (exclusive), as bench/mirror_compaction.py loads its table."""
    return pa.Table.from_pylist([value(key, 0) for key in range(low, high)])


def make_table(root: Path, rows: int, files: int, deleted: float, seed: int) -> str:
    """``rows`` rows in ``files`` files; with a DV deleting ``deleted`` of each file's if > 0."""
    uri = str(root)
    step = rows // files
    for part in range(files):
        write_deltalake(uri, rows_between(part * step, (part + 1) * step), mode="append")
    enable_deletion_vectors(DeltaTable(uri))
    if deleted > 0:
        rng = random.Random(seed)
        names = [path.rsplit("/", 1)[-1] for path in DeltaTable(uri).file_uris()]
        marks = {
            name: DeletedRows.from_indexes(rng.sample(range(step), int(step * deleted)))
            for name in names
        }
        commit_deletions(Location(uri), DeltaTable(uri), DeletionCommit("bench", 0, marks))
    return uri


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=8, help="files of the many-file tables")
    parser.add_argument("--deleted", type=float, default=0.001, help="share of rows a DV deletes")
    parser.add_argument("--scans", type=int, default=7)
    parser.add_argument("--seed", type=int, default=43)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dv-scan-") as tmp:
        tables = {
            f"{files}_files_{'dv' if deleted else 'plain'}": make_table(
                Path(tmp) / f"{files}-{deleted}", args.rows, files, deleted, args.seed
            )
            for files in (1, args.files)
            for deleted in (0.0, args.deleted)
        }
        seconds: dict[str, list[float]] = {name: [] for name in tables}
        for _ in range(args.scans):
            for name, uri in tables.items():
                seconds[name].append(scan(uri)[0])
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    base = medians["1_files_plain"]
    print(
        json.dumps(
            {
                "bench": "deletion_vector_scan",
                "rows": args.rows,
                "files": args.files,
                "deleted": args.deleted,
                "scans": args.scans,
                "median_s": {name: round(value, 4) for name, value in medians.items()},
                "over_one_plain_file": {name: round(v / base, 2) for name, v in medians.items()},
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
