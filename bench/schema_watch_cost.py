"""What following schema changes costs the debezium-json planner, side by side.

The planner compares each change's Kafka Connect schema with its table's previous one (native,
a byte comparison) and, with ``columnTypes=true``, reads the schemas that differ as table schemas
(Python, once per distinct schema). This measures planning alone (the driver's ``LogPlanner``
over a whole log, no Spark) on a generated log whose change events carry the envelope, as Kafka
Connect's ``JsonConverter`` writes it (``schemas.enable=true``, about 1.3 KB of schema per
record):

- ``with_follow`` (``columnTypes=true``) against ``without_follow`` (``columnTypes=false``), in
  this build;
- with ``--baseline SITE`` (a directory where an earlier build of the package is installed, for
  example ``pip install --no-deps --target SITE .`` at the commit before schema changes), this
  build without following against that build: the native comparison's own cost.

Each measurement runs in a process of its own, alternating, ``--pairs`` times; the verdict is the
median of the per-pair ratios. Prints one JSON line. Run:
``.venv/bin/python bench/schema_watch_cost.py [--baseline SITE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_FIELDS = {
    "accounts": [("id", "int64"), ("owner", "string"), ("balance", "string"), ("note", "string")],
    "orders": [("id", "int64"), ("account_id", "int64"), ("amount", "string"), ("tag", "string")],
}


def _struct(name: str, fields: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [{"type": kind, "optional": c != "id", "field": c} for c, kind in fields],
        "optional": True,
        "name": name,
        "field": "after",
    }


def _schema(table: str) -> dict[str, Any]:
    value = _struct(f"bench.public.{table}.Value", _FIELDS[table])
    source = {
        "type": "struct",
        "field": "source",
        "name": "io.debezium.connector.postgresql.Source",
        "fields": [
            {"type": "string", "optional": False, "field": f}
            for f in ("version", "connector", "name", "db", "schema", "table", "snapshot")
        ]
        + [{"type": "int64", "optional": True, "field": f} for f in ("ts_ms", "txId", "lsn")],
    }
    transaction = {
        "type": "struct",
        "field": "transaction",
        "optional": True,
        "fields": [
            {"type": "string", "optional": False, "field": "id"},
            {"type": "int64", "optional": False, "field": "total_order"},
            {"type": "int64", "optional": False, "field": "data_collection_order"},
        ],
    }
    return {
        "type": "struct",
        "name": f"bench.public.{table}.Envelope",
        "fields": [{**value, "field": "before"}, value, source, transaction],
    }


def write_envelope_log(directory: Path, transactions: int, seed: int = 7) -> int:
    """A log of ``transactions`` transactions of 1-6 changes, in files of 5,000 lines."""
    rng = random.Random(seed)
    schemas = {t: json.dumps(_schema(t), separators=(",", ":")) for t in _FIELDS}
    lines: list[str] = []
    changes = 0
    for txn in range(1, transactions + 1):
        size = rng.randint(1, 6)
        lines.append(json.dumps({"status": "BEGIN", "id": str(txn), "event_count": None}))
        counts: dict[str, int] = {}
        for order in range(1, size + 1):
            table = rng.choice(list(_FIELDS))
            counts[table] = counts.get(table, 0) + 1
            after = {c: (rng.randint(1, 10**6) if k == "int64" else f"v{rng.random():.6f}")
                     for c, k in _FIELDS[table]}  # fmt: skip
            payload = {
                "before": None,
                "after": after,
                "source": {"name": "bench", "schema": "public", "table": table, "ts_ms": txn},
                "op": "c",
                "ts_ms": txn,
                "transaction": {"id": str(txn), "total_order": order,
                                "data_collection_order": counts[table]},
            }  # fmt: skip
            payload_text = json.dumps(payload, separators=(",", ":"))
            lines.append(f'{{"schema":{schemas[table]},"payload":{payload_text}}}')
            changes += 1
        collections = [
            {"data_collection": f"public.{t}", "event_count": n} for t, n in counts.items()
        ]
        lines.append(json.dumps({"status": "END", "id": str(txn), "event_count": size,
                                 "data_collections": collections}))  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    for number, start in enumerate(range(0, len(lines), 5000), 1):
        chunk = "\n".join(lines[start : start + 5000]) + "\n"
        (directory / f"{number:010d}.jsonl").write_text(chunk)
    return changes


def _child(log: str, follow: bool) -> None:
    from spark_ckpt.sources.debezium.log_offset import initial_offset
    from spark_ckpt.sources.debezium.planner import LogPlanner
    from spark_ckpt.state.storage import Location

    started = time.perf_counter()
    try:
        planner = LogPlanner(Location(log), initial_offset("name"), False, follow)
    except TypeError:  # a build before schema changes: nothing to follow
        planner = LogPlanner(Location(log), initial_offset("name"), False)
    planner.scan(None, None)
    if follow:
        planner.schema_rows()
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "units": len(planner.unit_sizes())}))


def _measure(log: Path, follow: bool, site: str | None) -> float:
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = site
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(log), "--follow", str(follow)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return float(json.loads(done.stdout.splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--transactions", type=int, default=60_000)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--baseline", help="site directory of an earlier build")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--follow", default="False", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.follow == "True")
        return
    with tempfile.TemporaryDirectory(prefix="schema-watch-") as work:
        log = Path(work) / "log"
        changes = write_envelope_log(log, args.transactions)
        follow_ratios, native_ratios = [], []
        times: dict[str, list[float]] = {"with_follow": [], "without_follow": [], "baseline": []}
        for _ in range(args.pairs):
            without = _measure(log, False, None)
            with_follow = _measure(log, True, None)
            times["without_follow"].append(without)
            times["with_follow"].append(with_follow)
            follow_ratios.append(with_follow / without)
            if args.baseline:
                baseline = _measure(log, False, args.baseline)
                times["baseline"].append(baseline)
                native_ratios.append(without / baseline)
        result: dict[str, Any] = {
            "bench": "schema_watch_cost",
            "changes": changes,
            "pairs": args.pairs,
            "median_s": {k: round(statistics.median(v), 3) for k, v in times.items() if v},
            "with_follow_over_without": round(statistics.median(follow_ratios), 3),
        }
        if native_ratios:
            result["this_build_over_baseline"] = round(statistics.median(native_ratios), 3)
        print(json.dumps(result))


if __name__ == "__main__":
    main()
