"""The cluster test's Python environment: the wheel in a fresh venv, packed for ``spark.archives``.

What a user does to ship spark-ckpt to a cluster whose nodes have no Rust toolchain and no
source tree (Spark's "Python Package Management" guide, the venv-pack route):

1. a fresh virtual environment, the wheel installed into it with ``cargo`` and ``rustc`` on
   ``PATH`` shadowed by commands that fail (so a wheel that needed compiling would fail here,
   not on a worker);
2. ``venv-pack`` packs it into one archive, without ``pyspark``: every Python worker Spark starts
   has the cluster's own ``$SPARK_HOME/python/lib/pyspark.zip`` first on its ``PYTHONPATH``, so a
   second PySpark in the archive would be 485 MB that nothing imports;
3. the driver ships it with ``spark.archives=<archive>#environment``; each executor unpacks it
   into its working directory and starts Python workers with ``./environment/bin/python``.

venv-pack's documented limit applies: the environment's ``bin/python`` links to the interpreter
it was made from, so the workers' machines need that Python at the same path (the same image).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness import ROOT

__all__ = [
    "ARCHIVE_NAME",
    "EXECUTOR_PYTHON",
    "PackedEnvironment",
    "packed_environment",
    "release_wheel",
]

# The name the executors unpack the archive under, in their working directory.
ARCHIVE_NAME = "environment"
EXECUTOR_PYTHON = f"./{ARCHIVE_NAME}/bin/python"


def release_wheel() -> Path:
    """The manylinux wheel ``scripts/wheel.sh`` built; built now when there is none yet.

    The test command builds it first and names it in ``SPARK_CKPT_TEST_WHEEL``; a developer who
    runs a cluster test alone gets it built here (about two minutes).
    """
    named = os.environ.get("SPARK_CKPT_TEST_WHEEL")
    if named:
        wheel = Path(named)
        if not wheel.is_file():
            raise FileNotFoundError(f"SPARK_CKPT_TEST_WHEEL names {wheel}, which is not a file")
        return wheel
    # --no-setup: the running .venv stays as it is (other test processes import from it).
    subprocess.run([str(ROOT / "scripts" / "wheel.sh")], check=True, timeout=1200)
    wheels = sorted((ROOT / "dist").glob("spark_ckpt-*manylinux*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"scripts/wheel.sh left {len(wheels)} manylinux wheels in dist/")
    return wheels[0]


@dataclass(frozen=True)
class PackedEnvironment:
    """The packed archive and the environment it was packed from.

    Attributes
    ----------
    archive
        What ``spark.archives`` ships (``<archive>#environment``).
    venv
        The environment itself. A client-mode driver starts Python workers too (a Python data
        source plans on the driver, the sink's commits run there), with the same relative
        ``./environment/bin/python`` as the executors: :meth:`driver_directory` gives it a
        working directory where that path leads here.
    """

    archive: Path
    venv: Path

    def spark_conf(self) -> dict[str, str]:
        """The driver's settings that put the executors' Python workers in the archive."""
        return {
            "spark.archives": f"{self.archive}#{ARCHIVE_NAME}",
            "spark.pyspark.python": EXECUTOR_PYTHON,
        }

    def driver_directory(self, parent: Path) -> Path:
        """A working directory for a client-mode driver: ``./environment`` is :attr:`venv`."""
        directory = parent / "driver-cwd"
        directory.mkdir(parents=True, exist_ok=True)
        link = directory / ARCHIVE_NAME
        if not link.is_symlink():
            link.symlink_to(self.venv, target_is_directory=True)
        return directory


_NO_RUST = """#!/bin/sh
echo "$(basename "$0") was called while installing the wheel: it must not need Rust" >&2
exit 97
"""


def _without_rust(path: str, shims: Path) -> str:
    """``path`` with ``cargo`` and ``rustc`` shadowed by commands that fail, loudly.

    Shadowing rather than dropping the directories that hold them: a system ``rustc`` lives in
    ``/usr/bin`` beside everything else an install may run.
    """
    shims.mkdir(parents=True, exist_ok=True)
    for tool in ("cargo", "rustc"):
        shim = shims / tool
        shim.write_text(_NO_RUST)
        shim.chmod(0o755)
    return os.pathsep.join([str(shims), path])


def packed_environment(wheel: Path, workdir: Path, extras: str = "kafka") -> PackedEnvironment:
    """A fresh venv with ``wheel[extras]`` installed, packed by venv-pack.

    Runs once per test session (under a minute: the install copies pyarrow, deltalake and the rest
    from pip's cache, the pack writes about 650 MB). A ``.tar.gz``, lightly compressed: Spark
    4.2 unpacks a plain ``.tar`` in Java, which drops the executable bits (so
    ``./environment/bin/python`` cannot start) and refuses the venv's link to its interpreter
    (SPARK-38632, fixed after 4.2); ``.tar.gz`` goes through the system's ``tar``, which keeps
    both.
    """
    venv = workdir / "venv"
    # The interpreter the project's venv was made from, not the venv's own python.
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {**os.environ, "PATH": _without_rust(os.environ.get("PATH", ""), workdir / "no-rust")}
    env.pop("PYTHONPATH", None)
    env.pop("CARGO", None)  # setuptools-rust would run this one instead of cargo on PATH
    if shutil.which("cargo", path=env["PATH"]) != str(workdir / "no-rust" / "cargo"):
        raise AssertionError("a real cargo is first on PATH: the install would not prove the wheel")
    started = time.monotonic()
    # --no-compile: pip's byte-compiling of every installed module (PySpark's thousands, which
    # the archive leaves out anyway) cost 15 s of the install's 46 s of CPU here; the workers
    # compile the few modules they import, once per unpacked archive.
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            *("-m", "pip", "install", "--quiet", "--no-compile", f"{wheel}[{extras}]"),
        ],
        check=True,
        env=env,
        timeout=900,
    )
    print(f"cluster env: installed {wheel.name} in {time.monotonic() - started:.0f}s", flush=True)
    archive = workdir / "environment.tar.gz"
    started = time.monotonic()
    subprocess.run(
        [
            str(Path(sys.executable).parent / "venv-pack"),
            "--prefix",
            str(venv),
            "--output",
            str(archive),
            "--compress-level",
            "1",
            # The cluster's PySpark is the one every worker imports (see the module docstring).
            "--exclude",
            "lib/python*/site-packages/pyspark/*",
            "--quiet",
        ],
        check=True,
        env=env,
        timeout=900,
    )
    print(f"cluster env: packed in {time.monotonic() - started:.0f}s", flush=True)
    return PackedEnvironment(archive, venv)
