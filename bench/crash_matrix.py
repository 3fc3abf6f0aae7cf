"""Crash matrix: SIGKILL the driver at every delta-2pc protocol point, several times each.

For each point (after staging, after the manifest, after commits/N before publish, during
publish, during abort) and each repetition (a different generated log), run the crash scenario
of :mod:`harness.faults.crash` and add up transactions lost, duplicated and torn (visible in part
in any Delta version, read with delta-spark). Prints one JSON line; all three must be 0.

``--store s3`` keeps log, table and checkpoint on an S3 server on loopback (started here; Spark
reaches it through s3a, spark-ckpt through pyarrow and delta-rs).

``--mirror`` runs ``mode=mirror`` instead (:mod:`harness.faults.mirror`): per repetition, a
driver killed at all six protocol points in successive batches, then at random moments; it
counts mirrors that differ from their source, checkpoints whose tables disagree, and gaps in
the checkpoint index. All must be 0.

Run: ``.venv/bin/python bench/crash_matrix.py [--repeat 3] [--store local|s3] [--mirror]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from harness.faults import crash
from harness.servers.s3 import S3Server
from spark_ckpt import local_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per protocol point")
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    parser.add_argument(
        "--mirror",
        action="store_true",
        help="mode=mirror: kill at all six protocol points and at random moments, per repetition",
    )
    args = parser.parse_args()
    if args.mirror:
        run_mirror(args.repeat)
        return
    server = S3Server().start() if args.store == "s3" else None
    try:
        run(args.repeat, server)
    finally:
        if server is not None:
            server.stop()


def run(repeat: int, server: S3Server | None) -> None:
    """Run every scenario ``repeat`` times; print the JSON line."""
    if server is None:
        spark = local_session("bench-crash-matrix")
    else:
        bucket = f"crash-{uuid.uuid4().hex[:8]}"
        server.create_bucket(bucket)
        spark = local_session("bench-crash-matrix", conf=server.spark_conf(), s3a=True)
    totals = {"lost": 0, "duplicated": 0, "torn": 0, "crashes": 0}
    runs = 0
    began = time.monotonic()
    per_point: dict[str, dict[str, int]] = {}
    for scenario in sorted(crash.SCENARIOS):
        point = {"runs": 0, "lost": 0, "duplicated": 0, "torn": 0}
        for repetition in range(repeat):
            with tempfile.TemporaryDirectory() as workdir:
                store = None
                if server is not None:
                    store = crash.Store.on_s3(server, bucket, uuid.uuid4().hex[:8])
                outcome = crash.run_scenario(spark, scenario, Path(workdir), repetition, store)
            runs += 1
            point["runs"] += 1
            for key in ("lost", "duplicated", "torn"):
                totals[key] += getattr(outcome, key)
                point[key] += getattr(outcome, key)
            totals["crashes"] += outcome.crashes
        per_point[scenario] = point
        print(json.dumps({"point": scenario, **point}), file=sys.stderr, flush=True)
    spark.stop()
    result = {
        "bench": "crash_matrix",
        "store": "local" if server is None else "s3",
        "scenarios": len(crash.SCENARIOS),
        "runs": runs,
        "sigkills": totals["crashes"],
        "lost": totals["lost"],
        "duplicated": totals["duplicated"],
        "torn": totals["torn"],
        "seconds": round(time.monotonic() - began),
    }
    print(json.dumps(result), flush=True)


def run_mirror(repeat: int) -> None:
    """Mirror mode: ``repeat`` chains of kills (each point, then random); print the JSON line."""
    from harness.faults import mirror

    spark = local_session("bench-crash-matrix-mirror")
    began = time.monotonic()
    totals = {"mismatched_tables": 0, "inconsistent_checkpoints": 0, "index_gaps": 0}
    sigkills = checkpoints = 0
    for repetition in range(repeat):
        with tempfile.TemporaryDirectory() as workdir:
            outcome = mirror.run_mirror_crashes(spark, Path(workdir), seed=repetition)
        print(outcome.to_json(), file=sys.stderr, flush=True)
        for key in totals:
            totals[key] += getattr(outcome, key)
        sigkills += outcome.crashes
        checkpoints += outcome.checkpoints
    spark.stop()
    result = {
        "bench": "crash_matrix_mirror",
        "points": list(mirror.PROTOCOL_FAULTS),
        "runs": repeat,
        "sigkills": sigkills,
        "checkpoints_checked": checkpoints,
        **totals,
        "seconds": round(time.monotonic() - began),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
