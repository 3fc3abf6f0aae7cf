"""Crash matrix: SIGKILL the driver at every delta-2pc protocol point, several times each.

For each point (after staging, after the manifest, after commits/N before publish, during
publish, during abort) and each repetition (a different generated log), run the crash scenario of
``crash_harness`` and add up transactions lost, duplicated and torn (visible in part in any Delta
version, read with delta-spark). Prints one JSON line; all three must be 0.

Run: ``.venv/bin/python bench/crash_matrix.py [--repeat 3]`` (see README).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import crash_harness

from spark_ckpt import local_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per protocol point")
    args = parser.parse_args()
    spark = local_session("bench-crash-matrix")
    totals = {"lost": 0, "duplicated": 0, "torn": 0, "crashes": 0}
    runs = 0
    began = time.monotonic()
    per_point: dict[str, dict[str, int]] = {}
    for scenario in sorted(crash_harness.SCENARIOS):
        point = {"runs": 0, "lost": 0, "duplicated": 0, "torn": 0}
        for repetition in range(args.repeat):
            with tempfile.TemporaryDirectory() as workdir:
                outcome = crash_harness.run_scenario(spark, scenario, Path(workdir), repetition)
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
        "scenarios": len(crash_harness.SCENARIOS),
        "runs": runs,
        "sigkills": totals["crashes"],
        "lost": totals["lost"],
        "duplicated": totals["duplicated"],
        "torn": totals["torn"],
        "seconds": round(time.monotonic() - began),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
