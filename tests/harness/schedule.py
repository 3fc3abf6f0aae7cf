"""The order in which the test command's two processes take the test modules: longest first.

pytest-xdist (``--dist loadfile``) hands out whole modules in the order of the collection, each
process taking the next when it has two tests or fewer left. Its own order (the modules with the
most tests first) put the one-test modules last, some of them minutes long, and one process
often ran alone at the end while the other sat idle: 190 s of the 1,648 s pytest took in one run
(1,626 s against 1,435 s of tests per process). Longest first (LPT, the classic rule for two
machines) leaves only short modules to even out the end: replayed on the test-seconds of five
full runs, each run's end came within a second of the ideal (its test-seconds halved).

A module's seconds come from :data:`SECONDS` (``tests/module_seconds.json``), written from a
full run's JUnit XML by ``python -m harness.schedule JUNIT_XML``; only the order depends on them,
so they need refreshing only when modules grow or shrink a lot. A module not in the file (a new
one) counts :data:`UNKNOWN_SECONDS`.

The Connect module (:data:`NOT_FIRST`) never starts in the first two places: it runs the demo
with a Connect server of its own, and the one run where it started at once, beside the other
process's first Spark session, the demo failed in Spark's plugin start-up (not reproduced
alone).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness import ROOT

SECONDS = ROOT / "tests" / "module_seconds.json"
UNKNOWN_SECONDS = 60.0
NOT_FIRST = ("tests/integration/test_connect_process.py",)


def load_seconds(path: Path = SECONDS) -> dict[str, float]:
    """Each module's test-seconds in the run the file was written from (empty without one)."""
    if not path.exists():
        return {}
    return {str(k): float(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


def module_order(modules: Sequence[str], seconds: Mapping[str, float]) -> list[str]:
    """``modules`` (paths relative to the checkout) longest first; ties keep their order.

    The :data:`NOT_FIRST` modules move to the third place when the order put them earlier.
    """
    ordered = sorted(modules, key=lambda m: -seconds.get(m, UNKNOWN_SECONDS))
    for module in NOT_FIRST:
        if module in ordered[:2] and len(ordered) > 2:
            ordered.remove(module)
            ordered.insert(2, module)
    return ordered


def seconds_from_junit(xml: Path) -> dict[str, float]:
    """Test-seconds per module (``tests/.../test_x.py``) in a pytest JUnit XML report."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(xml).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        # classname is the module's dotted path, then a class if any: tests.unit.test_x[.Class]
        module = "/".join(parts[:3]) + ".py"
        totals[module] += float(case.get("time", 0.0))
    return {m: round(s, 1) for m, s in sorted(totals.items())}


def main(argv: Sequence[str]) -> None:
    """Write :data:`SECONDS` from a JUnit XML report: ``python -m harness.schedule XML``."""
    if len(argv) != 1:
        raise SystemExit("usage: python -m harness.schedule JUNIT_XML")
    seconds = seconds_from_junit(Path(argv[0]))
    SECONDS.write_text(json.dumps(seconds, indent=1) + "\n", encoding="utf-8")
    print(f"{SECONDS}: {len(seconds)} modules, {sum(seconds.values()):.0f} test-seconds")


if __name__ == "__main__":
    main(sys.argv[1:])
