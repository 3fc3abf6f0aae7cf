"""The test tree itself: pytest imports test modules by their file name (no packages here).

The exception is the harness (``tests/harness``), the package ``harness``: its modules are
imported by their qualified names, so two of them may share a file name.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_file_name() -> None:
    """A second ``test_x.py`` in another folder stops the whole run at collection."""
    names = Counter(
        p.name
        for p in TESTS.rglob("*.py")
        if not {"fixtures", "harness"} & set(p.relative_to(TESTS).parts)
    )
    assert not [name for name, count in names.items() if count > 1 and name != "conftest.py"]
