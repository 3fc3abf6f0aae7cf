"""The test command's module order (``harness.schedule``): longest first, Connect not first."""

from __future__ import annotations

from pathlib import Path

from harness import schedule

CONNECT = schedule.NOT_FIRST[0]


def test_modules_go_longest_first_and_unknown_ones_count_a_default() -> None:
    seconds = {"a.py": 10.0, "b.py": 300.0, "c.py": 61.0}
    order = schedule.module_order(["a.py", "b.py", "c.py", "new.py"], seconds)
    assert order == ["b.py", "c.py", "new.py", "a.py"]  # new.py: UNKNOWN_SECONDS (60)


def test_the_connect_module_never_starts_in_the_first_two_places() -> None:
    seconds = {CONNECT: 500.0, "b.py": 300.0, "c.py": 200.0, "d.py": 1.0}
    assert schedule.module_order([CONNECT, "b.py", "c.py", "d.py"], seconds) == [
        "b.py",
        "c.py",
        CONNECT,
        "d.py",
    ]
    later = {CONNECT: 5.0, "b.py": 300.0, "c.py": 200.0, "d.py": 100.0}
    assert schedule.module_order(["d.py", CONNECT, "b.py", "c.py"], later)[-1] == CONNECT


def test_seconds_are_summed_per_module_from_a_junit_report(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_a" name="t1" time="1.25" />'
        '<testcase classname="tests.unit.test_a.Group" name="t2" time="2.5" />'
        '<testcase classname="tests.integration.test_b" name="t" time="40" />'
        "</testsuite></testsuites>",
        encoding="utf-8",
    )
    assert schedule.seconds_from_junit(report) == {
        "tests/integration/test_b.py": 40.0,
        "tests/unit/test_a.py": 3.8,
    }


def test_every_module_of_the_file_still_exists() -> None:
    """A renamed or removed module would keep its stale entry (and the new name its default)."""
    root = schedule.SECONDS.parent.parent
    missing = [m for m in schedule.load_seconds() if not (root / m).exists()]
    assert not missing, f"tests/module_seconds.json names modules that are gone: {missing}"
