"""The test tree itself: pytest imports test modules by their file name (no packages here)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_file_name() -> None:
    """A second ``test_x.py`` in another folder stops the whole run at collection."""
    names = Counter(p.name for p in TESTS.rglob("*.py") if "fixtures" not in p.parts)
    assert not [name for name, count in names.items() if count > 1 and name != "conftest.py"]
