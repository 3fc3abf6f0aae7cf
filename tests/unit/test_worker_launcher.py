"""spark-ckpt-python drops only the zips that duplicate the installed pyspark and py4j (no JVM)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from spark_ckpt_python import without_packaged_pyspark


def _installed_pyspark(site: Path) -> Path:
    """A site directory holding a pyspark package with its packed copy, as pip installs it."""
    package = site / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    zipped = package / "python" / "lib" / "pyspark.zip"
    zipped.write_bytes(b"")
    return zipped


def test_the_packed_copy_of_the_searched_package_is_dropped(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zipped = _installed_pyspark(site)
    py4j = site / "pyspark" / "python" / "lib" / "py4j-0.10.9.9-src.zip"
    path = os.pathsep.join([str(zipped), str(py4j), "/opt/user/lib"])
    assert without_packaged_pyspark(path, [str(site)]) == os.pathsep.join(
        [str(py4j), "/opt/user/lib"]
    ), "only pyspark.zip goes; py4j and the user's entries stay, in order"


def _installed_py4j(site: Path, version: str) -> None:
    """py4j ``version`` in ``site`` as pip installs it: the package and its dist-info."""
    (site / "py4j").mkdir(parents=True)
    (site / "py4j" / "__init__.py").write_text("")
    (site / f"py4j-{version}.dist-info").mkdir()


def test_the_py4j_zip_goes_when_the_same_py4j_is_installed(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zipped = _installed_pyspark(site)
    _installed_py4j(site, "0.10.9.9")
    py4j = zipped.with_name("py4j-0.10.9.9-src.zip")
    path = os.pathsep.join([str(zipped), str(py4j), "/opt/user/lib"])
    assert without_packaged_pyspark(path, [str(site)]) == "/opt/user/lib"


def test_the_py4j_zip_stays_beside_another_installed_version(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zipped = _installed_pyspark(site)
    _installed_py4j(site, "0.10.9.7")
    py4j = str(zipped.with_name("py4j-0.10.9.9-src.zip"))
    assert without_packaged_pyspark(py4j, [str(site)]) == py4j


def test_a_zip_whose_package_is_not_searched_is_kept(tmp_path: Path) -> None:
    zipped = _installed_pyspark(tmp_path / "elsewhere")
    path = str(zipped)
    assert without_packaged_pyspark(path, [str(tmp_path / "site-packages")]) == path


def test_a_spark_home_zip_is_kept(tmp_path: Path) -> None:
    """A cluster's SPARK_HOME/python/lib/pyspark.zip is not inside an installed package."""
    home = tmp_path / "spark" / "python" / "lib"
    home.mkdir(parents=True)
    (home / "pyspark.zip").write_bytes(b"")
    path = str(home / "pyspark.zip")
    assert without_packaged_pyspark(path, [str(tmp_path), str(tmp_path / "spark")]) == path


def test_a_zip_beside_a_directory_that_is_no_package_is_kept(tmp_path: Path) -> None:
    zipped = _installed_pyspark(tmp_path / "site-packages")
    (tmp_path / "site-packages" / "pyspark" / "__init__.py").unlink()
    assert without_packaged_pyspark(str(zipped), [str(tmp_path / "site-packages")]) == str(zipped)


def test_the_installed_launcher_runs_the_interpreter_with_spark_s_arguments() -> None:
    """The console script execs this interpreter, passing -c and the trimmed PYTHONPATH."""
    import pyspark

    launcher = Path(sysconfig.get_path("scripts")) / "spark-ckpt-python"
    assert launcher.is_file(), f"spark-ckpt-python is not installed in {launcher.parent}"
    packed = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"
    assert packed.is_file(), f"this pyspark install has no packed copy at {packed}"
    (py4j,) = packed.parent.glob("py4j-*-src.zip")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(packed), str(py4j), "/opt/user/lib"])}
    result = subprocess.run(
        [
            str(launcher),
            "-c",
            "import os, sys, pyspark, py4j; print(sys.executable); print(pyspark.__file__); "
            "print(py4j.__file__); print(os.environ['PYTHONPATH'])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    executable, imported, imported_py4j, python_path = result.stdout.splitlines()
    assert Path(executable).samefile(sys.executable)
    assert ".zip" not in imported, f"pyspark was imported from the zip: {imported}"
    assert ".zip" not in imported_py4j, f"py4j was imported from the zip: {imported_py4j}"
    assert python_path == "/opt/user/lib"
