"""``spark-ckpt-python``: the interpreter for Spark's Python workers, without a second PySpark.

Spark starts every Python process it needs (the daemon that forks task workers, and a fresh
process per streaming query for a Python data source's planning) with
``$SPARK_HOME/python/lib/pyspark.zip`` first on its ``PYTHONPATH``. With PySpark installed by
pip, ``SPARK_HOME`` is the installed ``pyspark`` package itself and that zip is a second copy of
the same files. Python caches no bytecode for modules imported from a zip, so each of those
processes compiles PySpark from source again: about 0.7 s of CPU before the process does
anything, paid by every streaming query's source runner.

This launcher removes that entry when it is the zip inside the very ``pyspark`` package the
interpreter imports otherwise (so the code that runs is unchanged), and the py4j zip beside it
(``py4j-<version>-src.zip``, likewise compiled again by every process that imports py4j: about
0.1 s of CPU) when the same version of py4j is installed where the interpreter looks, as pip
installs it with PySpark. It then replaces itself with the interpreter and the arguments Spark
gave. Every other ``PYTHONPATH`` entry (a cluster's own ``SPARK_HOME``, the user's) passes
through untouched. It imports nothing beyond the standard library: it runs before every Python
worker.

:func:`spark_ckpt.local_session` sets ``PYSPARK_PYTHON`` to it; elsewhere, set
``spark.pyspark.python`` to the ``spark-ckpt-python`` next to the environment's ``python``.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main", "without_packaged_pyspark"]


def _same_directory(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _py4j_version(name: str) -> str | None:
    """``0.10.9.9`` for ``py4j-0.10.9.9-src.zip``; None for any other name."""
    prefix, suffix = "py4j-", "-src.zip"
    if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix + suffix):
        return name[len(prefix) : -len(suffix)]
    return None


def _py4j_installed(version: str, search_path: list[str]) -> bool:
    """Whether a searched directory holds py4j ``version`` as pip installs it.

    Its package and its ``py4j-<version>.dist-info``: Python imports it from there without the
    zip.
    """
    for item in search_path:
        if not item:
            continue
        package = os.path.join(item, "py4j", "__init__.py")
        if os.path.isfile(package) and os.path.isdir(
            os.path.join(item, f"py4j-{version}.dist-info")
        ):
            return True
    return False


def _is_packaged_copy(entry: str, search_path: list[str]) -> bool:
    """True when ``entry`` is a zip in ``<dir>/pyspark/python/lib/`` and ``<dir>`` is searched.

    ``<dir>/pyspark`` must be a package (its ``__init__.py`` present), so with the zip gone
    Python imports that package: the files the zip was packed from, in the same wheel. For
    ``py4j-<version>-src.zip``, py4j of that version must be installed in a searched directory.
    """
    name = os.path.basename(entry)
    py4j = _py4j_version(name)
    if name != "pyspark.zip" and py4j is None:
        return False
    package = os.path.dirname(os.path.dirname(os.path.dirname(entry)))
    if os.path.basename(package) != "pyspark":
        return False
    if not os.path.isfile(os.path.join(package, "__init__.py")):
        return False
    parent = os.path.dirname(package)
    if not any(_same_directory(parent, item) for item in search_path if item):
        return False
    return py4j is None or _py4j_installed(py4j, search_path)


def without_packaged_pyspark(python_path: str, search_path: list[str]) -> str:
    """``python_path`` without the installed package's own ``pyspark.zip`` and py4j zip.

    Runs before every Python worker Spark starts, once per process.

    Parameters
    ----------
    python_path
        A ``PYTHONPATH`` value (entries joined by :data:`os.pathsep`).
    search_path
        The directories the interpreter searches besides ``PYTHONPATH`` (its site-packages).

    Returns
    -------
    str
        The same entries in the same order, less the redundant zips.
    """
    entries = python_path.split(os.pathsep)
    kept = [entry for entry in entries if not _is_packaged_copy(entry, search_path)]
    return os.pathsep.join(kept)


def main() -> None:
    """Exec the interpreter with Spark's arguments and the trimmed ``PYTHONPATH``."""
    python_path = os.environ.get("PYTHONPATH")
    if python_path:
        own = set(python_path.split(os.pathsep))
        site = [item for item in sys.path if item not in own]
        os.environ["PYTHONPATH"] = without_packaged_pyspark(python_path, site)
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])


if __name__ == "__main__":
    main()
