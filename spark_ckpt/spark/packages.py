"""Spark packages resolved once per machine, then given to Spark as the jars Ivy retrieved.

A session built with ``spark.jars.packages`` runs Ivy's resolution at every start, even when
every jar is in Ivy's cache: the JVM reads and checks each module's descriptor before the
session exists. Measured on two busy cores: a local session with Delta's package started in
29-31 s, the same session with ``spark.jars`` naming the jars Ivy had retrieved in 20-25 s. A
streaming job restarted by its supervisor, a driver restarted after a kill, every test process:
each start paid it again. And the first start prints Ivy's whole report (about 170 lines, a
warning for every artifact one of the configured repositories could not serve) on the terminal.

So :func:`package_jars` resolves a set of packages once, in a short JVM of its own
(:func:`pyspark.java_gateway.launch_gateway`: ``spark-submit`` resolves the packages, then
starts the Python gateway, whose ``spark.jars`` system property lists the jars) whose output is
kept off the terminal, and remembers the jar list in a small file under the user's cache
directory, keyed by everything that decides the resolution (the coordinates, exclusions,
repositories, Ivy's settings and home, PySpark's version). Later starts read it back and pass
``spark.jars``: no resolution at all, as long as every jar it names is still there (a cleared Ivy
cache resolves again). Coordinates whose artifacts may change (a ``-SNAPSHOT``, a version range,
``latest.*``) are resolved at every start, as Spark does. A resolution that fails raises
:class:`PackageResolutionError` with Ivy's own lines about what could not be found or downloaded.

Runs on the driver, once per session build; the resolution itself once per machine and set of
packages.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from spark_ckpt.errors import PackageResolutionError
from spark_ckpt.state.storage import Location

__all__ = ["RESOLUTION_KEYS", "cache_file", "delta_package", "package_jars"]

RESOLUTION_KEYS = (
    "spark.jars.excludes",
    "spark.jars.repositories",
    "spark.jars.ivy",
    "spark.jars.ivySettings",
)
"""The Spark keys besides the coordinates that change what Ivy resolves, or where it puts it."""

_SCALA = "2.13"  # the Scala of every PySpark 4 distribution
_FORMAT = 1  # the remembered file's layout; a change makes every earlier file a miss
_EXIT_TIMEOUT_S = 60.0  # the gateway JVM exits within a second of its stdin closing
# Ivy's lines that say what went wrong, kept for the error when a resolution fails.
_PROBLEM_MARKERS = ("UNRESOLVED", "FAILED", "not found", "Exception", "Error", "problems")


def delta_package() -> str:
    """Delta's Maven coordinate for the installed ``delta-spark`` and PySpark.

    Runs on the driver, once per session build. The name ``configure_spark_with_delta_pip``
    (delta-spark 4.x) gives it: the artifact carries PySpark's major.minor version and Scala's.
    """
    import pyspark

    spark_minor = ".".join(pyspark.__version__.split(".")[:2])
    version = importlib.metadata.version("delta-spark")
    return f"io.delta:delta-spark_{spark_minor}_{_SCALA}:{version}"


def cache_file(packages: Sequence[str], conf: Mapping[str, str]) -> Location:
    """The file that remembers the jars of ``packages`` resolved with ``conf``'s settings.

    Runs on the driver, once per session build. Under ``$XDG_CACHE_HOME/spark-ckpt`` (by default
    ``~/.cache/spark-ckpt``), named by a digest of everything that decides the resolution.
    """
    import pyspark

    decided_by = {
        "format": _FORMAT,
        "pyspark": pyspark.__version__,
        "packages": list(packages),
        **{key: conf.get(key, "") for key in RESOLUTION_KEYS},
    }
    digest = hashlib.sha256(json.dumps(decided_by, sort_keys=True).encode()).hexdigest()[:24]
    return _cache_directory().child(f"resolved-jars-{digest}.json")


def _cache_directory() -> Location:
    """``$XDG_CACHE_HOME/spark-ckpt``, by default ``~/.cache/spark-ckpt`` (created on demand)."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Location(os.path.join(home, "spark-ckpt"))


def package_jars(packages: Sequence[str], conf: Mapping[str, str]) -> str:
    """``spark.jars`` for ``packages``: the local jars Ivy retrieved, comma-separated.

    Runs on the driver, once per session build. Reads the remembered list when every jar it
    names still exists; otherwise resolves (see the module docstring) and remembers the result.

    Raises
    ------
    PackageResolutionError
        When Ivy cannot resolve or download a package (with Ivy's lines saying which).
    """
    if not all(_fixed(coordinate) for coordinate in packages):
        return ",".join(_resolve(packages, conf))  # what they resolve to may change: ask Ivy
    remembered = cache_file(packages, conf)
    jars = _remembered_jars(remembered)
    if jars is None:
        jars = _resolve(packages, conf)
        _cache_directory().make_dirs()
        remembered.write_bytes(json.dumps({"format": _FORMAT, "jars": jars}).encode())
    return ",".join(jars)


def _fixed(coordinate: str) -> bool:
    """Whether a coordinate names one release (not a ``-SNAPSHOT``, a range or ``latest.*``)."""
    version = coordinate.rsplit(":", 1)[-1]
    changing = version.endswith("SNAPSHOT") or version.startswith("latest.")
    return not changing and not any(mark in version for mark in "[]()+,")


def _remembered_jars(remembered: Location) -> list[str] | None:
    """The jars a file remembers, or ``None`` when it is missing, unreadable or names a lost jar."""
    data = remembered.read_bytes()
    if data is None:
        return None
    try:
        content = json.loads(data)
        jars = [str(jar) for jar in content["jars"]]
    except (ValueError, KeyError, TypeError):
        return None  # a file of another layout or cut short: resolve again and rewrite it
    if content.get("format") != _FORMAT or not jars:
        return None
    if not all(Location(jar).exists() for jar in jars):
        return None  # Ivy's cache was cleared (or moved) since
    return jars


def _resolve(packages: Sequence[str], conf: Mapping[str, str]) -> list[str]:
    """Resolve ``packages`` in a JVM of their own, its output kept off the terminal."""
    from pyspark import SparkConf
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    resolve_conf = SparkConf(loadDefaults=False)
    resolve_conf.set("spark.jars.packages", ",".join(packages))
    for key in RESOLUTION_KEYS:
        if conf.get(key):
            resolve_conf.set(key, conf[key])
    with tempfile.TemporaryFile() as output:
        try:
            # PySpark's own launcher, untyped: what it returns is py4j's gateway.
            gateway = launch_gateway(  # type: ignore[no-untyped-call]
                resolve_conf, {"stdout": output, "stderr": output}
            )
        except PySparkRuntimeError as error:  # the JVM exited: spark-submit's resolution failed
            output.seek(0)
            report = output.read().decode("utf-8", errors="replace").splitlines()
            problems = [line for line in report if any(m in line for m in _PROBLEM_MARKERS)]
            raise PackageResolutionError(
                f"Spark could not resolve the packages {', '.join(packages)} from Maven: "
                + ("\n".join(problems[-30:]) or "\n".join(report[-30:]))
                + "\nCheck the machine reaches Maven Central (or the repositories in "
                "spark.jars.repositories) and that each coordinate exists."
            ) from error
        try:
            listed = gateway.jvm.System.getProperty("spark.jars")
        finally:
            gateway.shutdown()
            process = gateway.proc
            if process is not None:
                process.stdin.close()  # the gateway exits when its stdin closes
                process.wait(_EXIT_TIMEOUT_S)
    jars = [jar for jar in str(listed or "").split(",") if jar]
    if not jars:
        raise PackageResolutionError(
            f"Spark resolved the packages {', '.join(packages)} but listed no jar for them; "
            "start the session with spark.jars.packages to see Ivy's report"
        )
    return jars
