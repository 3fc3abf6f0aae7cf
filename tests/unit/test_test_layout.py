"""The test tree itself: test modules are imported by file name, the harness as a package.

pytest imports the modules under ``tests/`` by their file name (no packages there), except the
harness (``tests/harness``), the package ``harness`` that the tests and ``bench/`` import from
``tests/`` on ``sys.path``: ``scripts/setup.sh`` puts it there with a ``.pth`` file, pytest with
its ``pythonpath`` option. Nothing edits ``sys.path`` at run time.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
HARNESS = "harness"


def _by_file_name() -> list[Path]:
    """The modules pytest imports by their file name: all but the fixtures and the harness."""
    return [
        p
        for p in TESTS.rglob("*.py")
        if not {"fixtures", HARNESS} & set(p.relative_to(TESTS).parts)
    ]


def test_no_two_test_modules_share_a_file_name() -> None:
    """A second ``test_x.py`` in another folder stops the whole run at collection."""
    names = Counter(p.name for p in _by_file_name())
    assert not [name for name, count in names.items() if count > 1 and name != "conftest.py"]


def test_no_module_imported_by_file_name_hides_the_harness() -> None:
    """A ``harness.py`` beside the tests would come first on ``sys.path``, before the package."""
    assert not [p for p in _by_file_name() if p.stem == HARNESS]
    assert (TESTS / HARNESS / "__init__.py").is_file()


_MUTATORS = {"insert", "append", "extend", "remove", "clear", "pop", "__setitem__"}


def _is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def sys_path_edits(source: str) -> list[int]:
    """The lines of ``source`` that change ``sys.path`` (a call, an assignment, ``site``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if node.func.attr in _MUTATORS and _is_sys_path(target):
                lines.append(node.lineno)
            if node.func.attr == "addsitedir":
                lines.append(node.lineno)
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            inner = target.value if isinstance(target, ast.Subscript) else target
            if _is_sys_path(inner):
                lines.append(node.lineno)
    return sorted(lines)


def test_the_check_sees_each_way_of_editing_sys_path() -> None:
    edits = [
        "sys.path.insert(0, 'bench')",
        "sys.path.append('bench')",
        "sys.path[:0] = ['bench']",
        "sys.path += ['bench']",
        "sys.path = ['bench']",
        "site.addsitedir('bench')",
    ]
    for edit in edits:
        assert sys_path_edits(f"import sys, site\n{edit}\n") == [2], edit
    assert sys_path_edits("import sys\nprint(sys.path[0], list(sys.path))\n") == []


def test_nothing_under_tests_or_bench_edits_sys_path() -> None:
    """The harness is imported from ``tests/`` on ``sys.path``: no file adds a directory there."""
    found = {
        str(path.relative_to(ROOT)): lines
        for directory in (TESTS, ROOT / "bench")
        for path in sorted(directory.rglob("*.py"))
        if (lines := sys_path_edits(path.read_text(encoding="utf-8")))
    }
    assert not found, f"sys.path edited at {found}"


def test_a_fault_driver_starts_as_a_module_of_the_harness(tmp_path: Path) -> None:
    """``python -m harness.faults.crash`` imports, as the crash tests start it, away from tests/.

    The working directory is elsewhere and PYTHONSAFEPATH keeps it off ``sys.path`` anyway, so the
    harness comes from the ``.pth`` file ``scripts/setup.sh test`` writes into the virtualenv.
    """
    done = subprocess.run(
        [sys.executable, "-m", "harness.faults.crash"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "usage: python -m harness.faults.crash" in done.stderr, (
        "the harness is not importable outside pytest: run `source scripts/setup.sh test`, which "
        f"writes spark_ckpt_tests.pth into the virtualenv's site-packages\n{done.stderr[-2000:]}"
    )
