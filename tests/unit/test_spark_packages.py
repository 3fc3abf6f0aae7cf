"""Spark packages are resolved once per machine and set of settings, then started from jars."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from delta import configure_spark_with_delta_pip
from pyspark.sql import SparkSession

from spark_ckpt.spark import packages
from spark_ckpt.spark.packages import cache_file, delta_package, package_jars

DELTA = ["io.delta:delta-spark_4.2_2.13:4.4.0"]


@pytest.fixture(autouse=True)
def _cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _jars(tmp_path: Path, *names: str) -> list[str]:
    found = []
    for name in names:
        (tmp_path / name).write_bytes(b"PK")
        found.append(f"file://{tmp_path / name}")
    return found


def _never_resolve(*_: object) -> list[str]:
    raise AssertionError("resolved although the jars were remembered")


def test_delta_package_is_the_coordinate_deltas_own_helper_names() -> None:
    """The artifact follows PySpark's major.minor and Delta's version, as delta-spark names it."""
    builder = configure_spark_with_delta_pip(SparkSession.builder)
    assert delta_package() == builder._options["spark.jars.packages"]


def test_every_setting_that_decides_the_resolution_names_another_file(tmp_path: Path) -> None:
    """Coordinates, exclusions, repositories and Ivy's settings each lead to a file of their own."""
    base = cache_file(DELTA, {})
    assert base.path.startswith(str(tmp_path / "cache" / "spark-ckpt"))
    assert cache_file(DELTA, {"spark.app.name": "other"}) == base  # not a resolution setting
    others = [
        cache_file([*DELTA, "org.apache.hadoop:hadoop-aws:3.5.0"], {}),
        cache_file(DELTA, {"spark.jars.excludes": "a:b"}),
        cache_file(DELTA, {"spark.jars.repositories": "https://repo.example"}),
        cache_file(DELTA, {"spark.jars.ivy": "/tmp/ivy"}),
        cache_file(DELTA, {"spark.jars.ivySettings": "/tmp/ivysettings.xml"}),
    ]
    assert len({base.path, *(other.path for other in others)}) == 6


def test_a_resolution_is_remembered_and_read_back_without_resolving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second start of the same packages reads the jars back; Ivy is not asked again."""
    jars = _jars(tmp_path, "a.jar", "b.jar")
    monkeypatch.setattr(packages, "_resolve", lambda *_: jars)
    assert package_jars(DELTA, {}) == ",".join(jars)
    monkeypatch.setattr(packages, "_resolve", _never_resolve)
    assert package_jars(DELTA, {}) == ",".join(jars)


@pytest.mark.parametrize(
    "remembered",
    [
        pytest.param(None, id="a jar it names is gone (Ivy's cache cleared)"),
        pytest.param(b'{"format": 1, "jars": [', id="cut short"),
        pytest.param(b'{"format": 0, "jars": ["file:///x.jar"]}', id="another layout"),
        pytest.param(b'{"format": 1, "jars": []}', id="no jars"),
    ],
)
def test_a_remembered_list_that_cannot_be_trusted_resolves_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, remembered: bytes | None
) -> None:
    """Anything but a whole list of jars that all exist is resolved again and rewritten."""
    jars = _jars(tmp_path, "a.jar", "b.jar")
    monkeypatch.setattr(packages, "_resolve", lambda *_: jars)
    package_jars(DELTA, {})
    if remembered is None:
        (tmp_path / "b.jar").unlink()
        fresh = _jars(tmp_path, "c.jar")
    else:
        cache_file(DELTA, {}).write_bytes(remembered)
        fresh = _jars(tmp_path, "d.jar")
    monkeypatch.setattr(packages, "_resolve", lambda *_: fresh)
    assert package_jars(DELTA, {}) == ",".join(fresh)
    data = cache_file(DELTA, {}).read_bytes()
    assert data is not None
    assert json.loads(data)["jars"] == fresh


@pytest.mark.parametrize(
    "changing",
    ["com.example:lib:1.0-SNAPSHOT", "com.example:lib:[1.0,2.0)", "com.example:lib:latest.release"],
)
def test_coordinates_whose_artifacts_may_change_are_resolved_at_every_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, changing: str
) -> None:
    """A snapshot, a range or latest.* is never remembered: Ivy is asked each time, as Spark."""
    calls: list[int] = []
    jars = _jars(tmp_path, "a.jar")

    def resolve(*_: object) -> list[str]:
        calls.append(1)
        return jars

    monkeypatch.setattr(packages, "_resolve", resolve)
    package_jars([*DELTA, changing], {})
    package_jars([*DELTA, changing], {})
    assert len(calls) == 2
    assert not list((tmp_path / "cache").rglob("*.json"))
