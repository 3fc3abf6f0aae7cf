"""``spark-ckpt-python``: the interpreter for Spark's Python workers, without a second PySpark.

Spark starts every Python process it needs (the daemon that forks task workers, and a fresh
process per streaming query for a Python data source's planning) with
``$SPARK_HOME/python/lib/pyspark.zip`` first on its ``PYTHONPATH``. With PySpark installed by
pip, ``SPARK_HOME`` is the installed ``pyspark`` package itself and that zip is a second copy of
the same files. Python caches no bytecode for modules imported from a zip, so each of those
processes compiles PySpark from source again: about 0.7 s of CPU before the process does
anything, paid by every streaming query's source runner.

This launcher removes that one entry when it is the zip inside the very ``pyspark`` package the
interpreter imports otherwise (so the code that runs is unchanged), then replaces itself with the
interpreter and the arguments Spark gave. Every other ``PYTHONPATH`` entry (py4j, a cluster's own
``SPARK_HOME``, the user's) passes through untouched. It imports nothing beyond the standard
library: it runs before every Python worker.

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


def _is_packaged_copy(entry: str, search_path: list[str]) -> bool:
    """True when ``entry`` is ``<dir>/pyspark/python/lib/pyspark.zip`` and ``<dir>`` is searched.

    ``<dir>/pyspark`` must be a package (its ``__init__.py`` present), so with the zip gone
    Python imports that package: the files the zip was packed from, in the same wheel.
    """
    if os.path.basename(entry) != "pyspark.zip":
        return False
    package = os.path.dirname(os.path.dirname(os.path.dirname(entry)))
    if os.path.basename(package) != "pyspark":
        return False
    if not os.path.isfile(os.path.join(package, "__init__.py")):
        return False
    parent = os.path.dirname(package)
    return any(_same_directory(parent, item) for item in search_path if item)


def without_packaged_pyspark(python_path: str, search_path: list[str]) -> str:
    """``python_path`` without the installed package's own ``pyspark.zip``.

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
        The same entries in the same order, less the redundant zip.
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
