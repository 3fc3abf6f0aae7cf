"""A mirror's full scan after many batches, with and without compaction, against fresh files.

One table is loaded with ``--rows`` rows, then ``--batches`` batches of ``--batch`` changes
(updates of uniformly random existing keys, a tenth deletes, a tenth inserts) are applied to two
mirrors side by side, planned and published as the sink's publisher does (``plan_batch``,
``apply_plan``, then ``compact_after_batch``), both merge-on-read with deletion vectors:

- **policy**: the sink's default compaction policy (after every 10th batch: files whose DVs
  delete a fifth of their rows purged, 10 or more small files packed);
- **none**: ``compactEvery=0``: DVs and each batch's small file accumulate;
- **strict**: what a user sets whose readers must never pay for a DV (``compactEvery=1``,
  ``compactDeletedRatio`` at its least): every file a batch gave a DV is purged right after it,
  and small files packed once there are 10 (the default).

After each batch of the last compaction cycle (the last 10 batches: right after a compaction, and
each batch until the next), the same rows are written to a third table (**fresh**: one pass,
sorted by key, no DV), and each table is read whole (delta-rs ``QueryBuilder``, every column,
DVs applied) ``--scans`` times, interleaved: each mirror's median over fresh's median is that
point's ratio. Reported: the ratios' median, least and greatest over the cycle, and the apply's
seconds per batch (compaction included for **policy** and **strict**). Prints one JSON line.
Run: ``.venv/bin/python bench/mirror_compaction.py [--rows 200000] [--batches 100]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from spark_ckpt.sinks.mirror.compaction import compact_after_batch
from spark_ckpt.sinks.mirror.compaction_policy import CompactionPolicy
from spark_ckpt.sinks.mirror.precommit import plan_batch
from spark_ckpt.sinks.mirror.publish import apply_plan
from spark_ckpt.sinks.staging import staged_name, write_staged_file
from spark_ckpt.sources.schema import ARROW_SCHEMA
from spark_ckpt.state.storage import Location

TABLE = "public.items"
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
STRICT = 1e-9
"""``compactDeletedRatio`` for **strict**: any file with a deleted row is past it."""


def change_rows(batch: int, changes: list[tuple[str, int, dict[str, Any] | None]]) -> pa.Table:
    """Change rows of one batch, as the ``txn-cdc`` source emits them."""
    columns: dict[str, list[Any]] = {f.name: [] for f in ARROW_SCHEMA}
    for index, (op, key, after) in enumerate(changes):
        row = {
            "source": "bench",
            "txn_id": f"t{batch}",
            "txn_order": batch,
            "txn_size": len(changes),
            "event_index": index,
            "commit_ts": EPOCH + dt.timedelta(seconds=batch),
            "table": TABLE,
            "op": op,
            "key": json.dumps({"id": key}),
            "before": json.dumps({"id": key}) if op == "d" else None,
            "after": None if after is None else json.dumps(after),
        }
        for name, value in row.items():
            columns[name].append(value)
    return pa.Table.from_pydict(columns, schema=ARROW_SCHEMA)


class Mirror:
    """A mirror root fed batch by batch as the sink's writer and publisher feed it."""

    def __init__(self, root: Path, policy: CompactionPolicy) -> None:
        self.root = Location(str(root))
        self.changelog = self.root.child("_changes")
        self.query_id = str(uuid.uuid4())
        self.policy = policy
        self.batch = 0

    def apply(self, rows: pa.Table) -> float:
        """Apply one batch's change rows; the seconds its publish (and compaction) took."""
        staged = write_staged_file(self.changelog, staged_name(self.query_id, self.batch, 0), rows)
        started = time.perf_counter()
        plan = plan_batch(
            self.root,
            self.changelog,
            [staged],
            self.query_id,
            self.batch,
            "a",
            compaction=self.policy,
        )
        apply_plan(plan, self.root.options, self.query_id, self.batch)
        compact_after_batch(plan, self.root.options, self.batch)
        self.batch += 1
        return time.perf_counter() - started

    @property
    def table_uri(self) -> str:
        """The mirror table's path."""
        return f"{self.root.path}/{TABLE}"


def value(key: int, batch: int) -> dict[str, Any]:
    return {"id": key, "qty": key % 97 + batch, "note": f"item {key} v{batch}", "price": key * 0.5}


def scan(uri: str) -> tuple[float, int]:
    """Seconds to read every column of every live row, and the rows read."""
    started = time.perf_counter()
    reader = QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT * FROM t")
    rows = sum(batch.num_rows for batch in reader)
    return time.perf_counter() - started, rows


def files_and_dvs(uri: str) -> tuple[int, int]:
    table = DeltaTable(uri)
    files = len(table.file_uris())
    dvs = pa.table(table.deletion_vectors()).num_rows if hasattr(table, "deletion_vectors") else -1
    return files, dvs


def measure(mirrors: dict[str, Mirror], fresh: Path, rows: int, scans: int) -> dict[str, float]:
    """Each mirror's full scan over the same rows' fresh table's (medians of ``scans`` each)."""
    source = DeltaTable(mirrors["policy"].table_uri)
    current = pa.table(
        QueryBuilder().register("t", source).execute("SELECT * FROM t ORDER BY id")
    ).cast(pa.schema(source.schema().to_arrow()))
    write_deltalake(str(fresh), current)
    uris = {name: mirror.table_uri for name, mirror in mirrors.items()}
    uris["fresh"] = str(fresh)
    seconds: dict[str, list[float]] = {name: [] for name in uris}
    for _ in range(scans):
        for name, uri in uris.items():
            took, count = scan(uri)
            assert count == rows, f"{name} read {count} rows, the source has {rows}"
            seconds[name].append(took)
    fresh_s = statistics.median(seconds["fresh"])
    return {name: statistics.median(seconds[name]) / fresh_s for name in mirrors}


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "least": round(min(values), 3),
        "greatest": round(max(values), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--scans", type=int, default=5)
    parser.add_argument("--seed", type=int, default=43)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="mirror-compaction-") as tmp:
        work = Path(tmp)
        mirrors = {
            "policy": Mirror(work / "policy", CompactionPolicy()),
            "none": Mirror(work / "none", CompactionPolicy(every=0)),
            "strict": Mirror(work / "strict", CompactionPolicy(every=1, deleted_ratio=STRICT)),
        }
        load = change_rows(0, [("c", k, value(k, 0)) for k in range(args.rows)])
        for mirror in mirrors.values():
            mirror.apply(load)
        keys = list(range(args.rows))
        next_key = args.rows
        apply_seconds: dict[str, list[float]] = {name: [] for name in mirrors}
        ratios: dict[str, list[float]] = {name: [] for name in mirrors}
        layout: dict[str, list[tuple[int, int]]] = {name: [] for name in mirrors}
        cycle = CompactionPolicy().every
        for batch in range(1, args.batches + 1):
            changes: list[tuple[str, int, dict[str, Any] | None]] = []
            for key in rng.sample(keys, args.batch * 8 // 10):
                changes.append(("u", key, value(key, batch)))
            for key in rng.sample(keys, args.batch // 10):
                changes.append(("d", key, None))
            gone = {key for op, key, _ in changes if op == "d"}
            changes = [c for c in changes if c[0] == "d" or c[1] not in gone]
            for _ in range(args.batch // 10):
                changes.append(("c", next_key, value(next_key, batch)))
                keys.append(next_key)
                next_key += 1
            keys = [k for k in keys if k not in gone]
            rows = change_rows(batch, changes)
            for name, mirror in mirrors.items():
                apply_seconds[name].append(mirror.apply(rows))
            if batch % 10 == 0:
                print(f"batch {batch}: {len(keys)} rows", file=sys.stderr, flush=True)
            if batch > args.batches - cycle:
                point = measure(mirrors, work / f"fresh-{batch}", len(keys), args.scans)
                for name in ratios:
                    ratios[name].append(point[name])
                    layout[name].append(files_and_dvs(mirrors[name].table_uri))
    print(
        json.dumps(
            {
                "bench": "mirror_compaction",
                "rows": len(keys),
                "batches": args.batches,
                "batch": args.batch,
                "scans": args.scans,
                "cycle_batches": cycle,
                "scan_ratio_policy_over_fresh": _spread(ratios["policy"]),
                "scan_ratio_none_over_fresh": _spread(ratios["none"]),
                "scan_ratio_strict_over_fresh": _spread(ratios["strict"]),
                "apply_s_per_batch": {
                    name: round(statistics.median(values), 4)
                    for name, values in apply_seconds.items()
                },
                "apply_s_per_batch_mean": {
                    name: round(statistics.fmean(values), 4)
                    for name, values in apply_seconds.items()
                },
                "files_and_dvs_over_the_cycle": layout,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
