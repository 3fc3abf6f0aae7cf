"""A correctly configured local SparkSession for spark-ckpt, so nobody repeats the boilerplate."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from spark_ckpt.errors import JavaNotFoundError
from spark_ckpt.spark.packages import delta_package, package_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CHECKPOINT_FILE_MANAGER_KEY",
    "HADOOP_AWS",
    "LOCAL_CHECKPOINT_FILE_MANAGER",
    "S3A_EXCLUDES",
    "S3A_PACKAGES",
    "JavaNotFoundError",
    "check_java",
    "local_session",
    "package_conf",
    "worker_python",
]

HADOOP_AWS = "org.apache.hadoop:hadoop-aws:3.5.0"
"""Spark's s3a connector, matching the Hadoop (3.5.0) bundled with pyspark 4.2."""

CHECKPOINT_FILE_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
"""Spark's setting for how a query's offset and commit logs are written."""

LOCAL_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
"""What :func:`local_session` sets :data:`CHECKPOINT_FILE_MANAGER_KEY` to on a ``local`` master
(unless ``conf`` says otherwise): fewer processes per micro-batch on a local checkpoint."""

_AWS_SDK = "2.35.4"  # the SDK version hadoop-aws 3.5.0 is built and tested against

S3A_PACKAGES = (
    HADOOP_AWS,
    f"software.amazon.awssdk:s3:{_AWS_SDK}",
    f"software.amazon.awssdk:s3-transfer-manager:{_AWS_SDK}",
    f"software.amazon.awssdk:sts:{_AWS_SDK}",  # assumed-role and web-identity credentials
)
"""hadoop-aws with the AWS SDK v2 modules it uses, instead of the SDK's ``bundle``.

hadoop-aws depends on the ``bundle`` jar (about 600 MB: every AWS service, shaded). s3a needs
three of its modules; with their own dependencies they come to about 10 MB. Measured: a session
resolving these reads and writes a Delta table and a streaming checkpoint on ``s3a://`` exactly
as with the bundle, and every executor of a cluster fetches 10 MB instead of 600 MB."""

S3A_EXCLUDES = ("software.amazon.awssdk:bundle",)
"""What :data:`S3A_PACKAGES` replaces, for ``spark.jars.excludes``."""

_DELTA_EXCLUDES = ("org.apache.hadoop:hadoop-client-api", "org.apache.hadoop:hadoop-client-runtime")
"""Delta's jars pull Hadoop's client jars at 3.4.2 beside the 3.5.0 ones pyspark bundles: 50 MB
of classes Spark's own copies shadow, which every executor would still fetch."""

_MIN_JAVA = 17


def check_java() -> int:
    """Return the Java major version Spark will use, or explain how to install one.

    Runs on the driver, once per session build.

    Raises
    ------
    JavaNotFoundError
        When ``java`` is missing or older than 17 (Spark 4 needs 17 or 21).
    """
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise JavaNotFoundError(
            "Spark needs a Java runtime (17 or 21) but none was found: install one (Debian: "
            "apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
        )
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaNotFoundError(f"could not run {java} -version: {e}") from e
    version = out.split('"')[1] if '"' in out else ""
    head = version.split(".")[0]
    major = int(version.split(".")[1]) if head == "1" else int(head) if head.isdigit() else 0
    if major < _MIN_JAVA:
        raise JavaNotFoundError(
            f"Spark 4 needs Java 17 or 21, but {java} is version {version or 'unknown'}: "
            f"install openjdk-17 and point JAVA_HOME at it"
        )
    return major


def local_cores(master: str) -> int:
    """The number of cores a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master uses.

    Runs on the driver, once per session build.
    """
    inside = master[len("local") :].strip("[]").split(",")[0]
    if inside in ("", "*"):
        return 1 if inside == "" else os.cpu_count() or 1
    return max(1, int(inside)) if inside.isdigit() else 1


def worker_python() -> str:
    """The executable for Spark's Python workers: ``spark-ckpt-python``, else this interpreter.

    Runs on the driver, once per session. The launcher must sit in this interpreter's scripts
    directory (it runs it); a missing one (a source checkout run without installing) falls back
    to the interpreter itself, which works the same, only slower to start.
    """
    scripts = Path(sysconfig.get_path("scripts"))
    launcher = scripts / "spark-ckpt-python"
    if launcher.is_file() and os.access(launcher, os.X_OK):
        return str(launcher)
    return sys.executable


def package_conf(
    conf: Mapping[str, str], *, packages: Sequence[str] = (), s3a: bool = False
) -> dict[str, str]:
    """``conf`` with Delta's jar, s3a's when asked and ``packages`` named in ``spark.jars``.

    Runs on the driver, once per session start (:func:`local_session`), or alone to resolve a
    set of packages ahead of the sessions that will use it (the test command does, while the
    wheel builds). The packages reach Spark as the jars they resolved to
    (:mod:`spark_ckpt.spark.packages`): Ivy resolves a set once per machine, on its first use,
    instead of at every session start. ``spark.jars.packages`` and ``spark.jars.excludes`` in
    ``conf`` are resolved with them.

    Raises
    ------
    PackageResolutionError
        A package could not be resolved (Ivy's lines about it are quoted).
    """
    conf = dict(conf)
    excludes = [*_DELTA_EXCLUDES, *(S3A_EXCLUDES if s3a else ())]
    if conf.get("spark.jars.excludes"):
        excludes.append(conf["spark.jars.excludes"])
    conf["spark.jars.excludes"] = ",".join(excludes)
    coordinates = [delta_package(), *(S3A_PACKAGES if s3a else ()), *packages]
    coordinates += filter(None, conf.pop("spark.jars.packages", "").split(","))
    jars = [package_jars(coordinates, conf), *filter(None, [conf.get("spark.jars")])]
    conf["spark.jars"] = ",".join(jars)
    return conf


def local_session(
    app_name: str = "spark-ckpt",
    *,
    master: str = "local[2]",
    conf: Mapping[str, str] | None = None,
    packages: Sequence[str] = (),
    s3a: bool = False,
    connect: bool = False,
) -> SparkSession:
    """Build (or get) a local SparkSession ready for spark-ckpt and Delta Lake.

    Runs on the driver, once per process. Sets ``PYSPARK_PYTHON`` to ``spark.pyspark.python``
    when ``conf`` has it, else to the running interpreter
    (so Python workers can import spark-ckpt), started through ``spark-ckpt-python`` when it is
    installed beside it (:mod:`spark_ckpt_python`: workers import the installed PySpark with its
    cached bytecode instead of compiling the copy in ``pyspark.zip``, about 0.7 s saved per
    process Spark starts, one per streaming query at least), and ``PYTHONSAFEPATH`` (so they
    import the installed package, not a source checkout in the working directory); adds Delta's
    SQL extension, catalog and jar (resolved by Ivy from Maven Central on the first use of a set
    of packages, quietly, then named to Spark by the jars Ivy retrieved:
    :mod:`spark_ckpt.spark.packages`); turns the UI and the console progress bar off and keeps
    shuffles small, and on a ``local`` master has Delta rebuild a table's state with one
    partition per core and writes streaming checkpoints' offset and commit logs with Spark's
    ``FileSystem``-based checkpoint file manager (:data:`LOCAL_CHECKPOINT_FILE_MANAGER`; a
    checkpoint on HDFS wants Spark's default: pass ``conf`` with
    :data:`CHECKPOINT_FILE_MANAGER_KEY` set to it).

    Parameters
    ----------
    app_name
        The Spark application name.
    master
        The Spark master (``local[2]`` matches a two-core machine).
    conf
        Extra Spark configuration, applied last.
    packages
        Extra Maven coordinates for ``spark.jars.packages`` besides Delta's.
    s3a
        Add Spark's s3a connector (:data:`S3A_PACKAGES`, without the AWS SDK bundle), for a
        ``checkpointLocation`` or delta-spark reads on ``s3a://``.
    connect
        Return a Spark Connect client of a local Connect server that pyspark starts from its
        bundled ``spark-connect`` jar (with the same settings), instead of a classic session.
        Needs the ``connect`` extra (``pip install 'spark-ckpt[connect]'``). A classic session
        and a Connect server cannot share one Python process.
    """
    check_java()
    conf = dict(conf or {})
    # Spark's own key for the workers' interpreter wins (a cluster's packed environment, say,
    # ``./environment/bin/python``); PySpark reads it from the environment variable only.
    os.environ["PYSPARK_PYTHON"] = conf.get("spark.pyspark.python") or worker_python()
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python workers start as ``python -m pyspark.daemon`` in the driver's working directory,
    # which puts that directory first on their sys.path. Started inside a source checkout, they
    # would import the checkout's spark_ckpt/ (which lacks the installed spark_ckpt.sources)
    # instead of the installed package. PYTHONSAFEPATH (Python 3.11+) keeps it off sys.path.
    os.environ.setdefault("PYTHONSAFEPATH", "1")
    from pyspark.sql import SparkSession

    base = SparkSession.builder.remote(master) if connect else SparkSession.builder.master(master)
    builder = (
        base.appName(app_name)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
    )
    if master.startswith("local"):
        # Delta rebuilds a table's state (each read of a version) with 50 partitions by default,
        # sized for clusters and logs of millions of files. Locally each is a task generating its
        # projection code anew: reading 14 versions of a small table took 76 s with 50, 27 s
        # with 2 and 24 s with 1 (tests/integration/test_worker_python.py checks it is set).
        builder = builder.config(
            "spark.databricks.delta.snapshotPartitions", str(local_cores(master))
        )
        # Every micro-batch writes offsets/N and commits/N. Spark's default checkpoint file
        # manager (FileContext) on Hadoop's local file system starts about 46 processes per
        # batch (chmod, stat, readlink); its FileSystem-based manager 12. On local disk both
        # write a temporary file and rename it after checking the name is free, so neither is
        # more atomic than the other there. bench/freshness.py: offset and commit logs from
        # 650 ms to 235 ms a batch on a busy 2-core machine, on the path of every change to
        # its Delta version. A checkpoint on HDFS wants the default: set it in ``conf``.
        builder = builder.config(CHECKPOINT_FILE_MANAGER_KEY, LOCAL_CHECKPOINT_FILE_MANAGER)
    for key, value in package_conf(conf, packages=packages, s3a=s3a).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not connect:  # a Connect client has no SparkContext; its server logs at WARN already
        spark.sparkContext.setLogLevel("WARN")
    return spark
