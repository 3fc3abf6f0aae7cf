"""The JVM options of the short-lived Spark drivers that crash tests start and kill.

A crash driver's JVM lives seconds, and a third of its CPU goes to loading and compiling the
same Spark and Delta classes every time. Two standard HotSpot features cut that without changing
what any driver does:

- C1 alone (``-XX:TieredStopAtLevel=1``) compiles what a short run executes for about a quarter
  less CPU than C1 then C2 (measured: 21 s -> 15.6 s of CPU for a 7-batch driver). Long-lived
  sessions are faster with C2, so only crash drivers get it.
- A dynamic class-data-sharing archive (JEP 350: ``-XX:ArchiveClassesAtExit`` once, then
  ``-XX:SharedArchiveFile``) maps the classes a driver loads, already parsed and verified, from
  one file. Measured here on a driver that starts a session and streams 30 transactions into
  Delta: 25.2-25.9 s -> 18.2-18.8 s (session start 8.8-10.1 s -> 5.9-6.1 s).

The archive is dumped once per machine by :func:`ensure_archive` (a driver that runs a small
query and exits normally; about 35 s), under a file lock so that test processes running side by
side dump it once, into ``.cache/jvm`` next to the other build caches. The JVM checks that an
archive matches its JDK and class path and ignores one that does not, so a stale archive costs
speed, never correctness. The archive goes to the driver JVM only (``SPARK_SUBMIT_OPTS``), not to
the launcher JVM that ``spark-submit`` starts first, whose class path differs.

Run ``python -m harness.faults.jvm_archive dump`` to (re)create it by hand (``ensure``: only when
missing, as the test command does before pytest starts);
``SPARK_CKPT_JVM_ARCHIVE=off`` runs the drivers without it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT
from harness.driver_options import interpret_drivers

CACHE = Path(os.environ.get("SPARK_CKPT_JVM_CACHE", ROOT / ".cache" / "jvm"))
C1_ONLY = "-XX:TieredStopAtLevel=1"
DUMP_TIMEOUT_S = 300.0
SWITCH = "SPARK_CKPT_JVM_ARCHIVE"
"""Set to ``off`` to run drivers without the archive (to measure what it saves)."""


def archive_path() -> Path:
    """Where this interpreter's drivers keep their archive: one per Python, PySpark and JDK."""
    import pyspark

    java_home = os.environ.get("JAVA_HOME", "")
    key = f"{sys.prefix}|{pyspark.__version__}|{java_home}".encode()
    return CACHE / f"driver-{pyspark.__version__}-{hashlib.sha256(key).hexdigest()[:12]}.jsa"


def ensure_archive() -> Path | None:
    """The archive, dumped first if this machine has none; None when dumping failed.

    Runs in a test process before its first crash driver; at most once per machine (others wait
    on the lock, bounded by the dump's timeout). A failed dump is reported on stderr and the
    drivers run without an archive (slower, the same otherwise); this process does not try again.
    """
    path = archive_path()
    if path.exists():
        return path
    if path in _FAILED:
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "dump.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists():
            return path
        dumped = _dump(path)
    if dumped is None:
        _FAILED.add(path)
    return dumped


_FAILED: set[Path] = set()
"""Archives whose dump failed in this process: not tried again for every driver (35 s each)."""


def _dump(path: Path) -> Path | None:
    partial = path.with_suffix(f".{os.getpid()}.partial")
    env = dict(os.environ)
    env.pop("SPARK_CKPT_FAULT", None)
    env["JAVA_TOOL_OPTIONS"] = _with(env.get("JAVA_TOOL_OPTIONS", ""), C1_ONLY)
    env["SPARK_SUBMIT_OPTS"] = _with(
        env.get("SPARK_SUBMIT_OPTS", ""), f"-XX:ArchiveClassesAtExit={partial}"
    )
    env["PYTHONSAFEPATH"] = "1"  # the working directory off sys.path (crash.start_driver)
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "harness.faults.jvm_archive", "workload"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=DUMP_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        print(
            f"jvm_archive: no archive, the dump took over {DUMP_TIMEOUT_S:.0f} s", file=sys.stderr
        )
        partial.unlink(missing_ok=True)
        return None
    if done.returncode != 0 or not partial.exists():
        tail = done.stderr.decode(errors="replace")[-2000:]
        print(f"jvm_archive: no archive (exit {done.returncode}):\n{tail}", file=sys.stderr)
        partial.unlink(missing_ok=True)
        return None
    partial.replace(path)
    print(
        f"jvm_archive: dumped {path.name} ({path.stat().st_size >> 20} MiB) in "
        f"{time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )
    return path


def _with(options: str, option: str) -> str:
    """``options`` with ``option`` appended unless a value for its flag is already there."""
    flag = option.split("=", 1)[0]
    return options if flag in options else f"{options} {option}".strip()


def driver_env(base: dict[str, str]) -> dict[str, str]:
    """``base`` with the JVM options of a crash driver: C1 only, and the archive when there is one.

    Runs in the test process, once per driver started.
    """
    env = dict(base)
    env["JAVA_TOOL_OPTIONS"] = _with(env.get("JAVA_TOOL_OPTIONS", ""), C1_ONLY)
    archive = None if os.environ.get(SWITCH) == "off" else ensure_archive()
    if archive is not None:
        env["SPARK_SUBMIT_OPTS"] = _with(
            env.get("SPARK_SUBMIT_OPTS", ""), f"-XX:SharedArchiveFile={archive}"
        )
    return env


def _workload() -> None:
    """What a crash driver does, small: a session, a change log streamed into Delta, a stop."""
    import random

    import spark_ckpt
    from spark_ckpt.testing.debezium_log import random_log, write_log

    spark = spark_ckpt.local_session("jvm-archive")
    control = spark_ckpt.install(spark)
    records, _ = random_log(random.Random(3), 30, max_size=10, interleave=4)
    with tempfile.TemporaryDirectory() as work:
        write_log(f"{work}/log", records, [len(records) // 2])
        query = (
            spark.readStream.format("txn-cdc")
            .option("connector", "debezium-json")
            .option("maxChangesPerTrigger", "40")
            .load(f"{work}/log")
            .writeStream.format("delta-2pc")
            .option("path", f"{work}/table")
            .option("checkpointLocation", f"{work}/checkpoint")
            .trigger(availableNow=True)
            .start()
        )
        assert control.await_termination(query, 240), "the archive's workload did not finish"
    spark.stop()


def main(argv: list[str]) -> int:
    if argv == ["workload"]:
        _workload()
        return 0
    if argv in (["dump"], ["ensure"]):
        if argv == ["dump"]:
            archive_path().unlink(missing_ok=True)
        # The drivers' options as in a test process (tests/conftest.py): the archive holds the
        # classes of what they run.
        interpret_drivers(os.environ)
        return 0 if ensure_archive() is not None else 1
    print("usage: python -m harness.faults.jvm_archive dump|ensure", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
