"""Crash harness: run txn-cdc -> delta-2pc drivers that are SIGKILLed at protocol points.

Each scenario runs the same bounded query (``Trigger.availableNow``) on one checkpoint location
several times: the first runs with ``SPARK_CKPT_FAULT`` armed, so the whole driver process group
(driver, JVM, Python workers) is SIGKILLed at that point; the last runs clean to the end. Then
delta-spark reads every version of the table and counts source transactions lost, duplicated,
or visible in part ("torn") in any version.

The log, the table and the checkpoint live in a local directory, or on an S3 server
(:class:`Store`), and the driver may run on a standalone cluster (``settings`` carries the Spark
configuration it starts with).

Used by ``bench/crash_matrix.py``, ``tests/integration/test_crash_recovery.py``,
``tests/integration/test_cluster.py`` and the other drivers of :mod:`harness.faults`. Run as a
module (``python -m harness.faults.crash drive LOG TABLE CKPT [SETTINGS]``) it is the driver
itself.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.faults import jvm_archive

CAP = 30
CRASH_BATCH = 2

# Fault specs per run; None is the final clean run.
SCENARIOS: dict[str, list[str | None]] = {
    "after_staging": [f"after_staging:{CRASH_BATCH}", None],
    "after_manifest": [f"after_manifest:{CRASH_BATCH}", None],
    "before_publish": [f"before_publish:{CRASH_BATCH}", None],
    "during_publish": [f"during_publish:{CRASH_BATCH}", None],
    # A re-run of the batch deletes the aborted attempt's files: crash in the middle of that.
    "during_abort": [f"after_manifest:{CRASH_BATCH}", f"during_abort:{CRASH_BATCH}", None],
    # The same kill under control.supervise() with a checkpoint hook: the restarted driver's
    # supervisor restores checkpoint CRASH_BATCH - 1 (discarding batch CRASH_BATCH's manifest
    # and staged files before the query starts) and hands the hook the data stored with it.
    "supervised_after_manifest": [f"after_manifest:{CRASH_BATCH}", None],
}
SUPERVISED = {"supervised_after_manifest"}
CHAINED = "every_point_in_turn"
# Every unsupervised kill point of SCENARIOS in one driver lineage, each in a later batch than
# the one before (the restart re-runs the killed batch, then goes on to the next kill): one JVM
# start per kill instead of a fresh log, checkpoint and clean run per point. The test suite runs
# this; bench/crash_matrix.py still runs each point alone, from a fresh start, many times.
SCENARIOS[CHAINED] = [
    f"after_staging:{CRASH_BATCH}",
    f"after_manifest:{CRASH_BATCH + 1}",
    f"before_publish:{CRASH_BATCH + 2}",
    f"during_publish:{CRASH_BATCH + 3}",
    f"after_manifest:{CRASH_BATCH + 4}",
    f"during_abort:{CRASH_BATCH + 4}",
    None,
]
SHORT_CHAINED = "the_commit_points_in_turn"
# The test command's chain (the whole one is in the soak tier): the kills around Spark's commit
# of a batch, where the two phases meet: pre-committed but not completed (and the re-run's
# abort of it), completed but not published, completed and half published. A kill after staging
# leaves only files no manifest names, which the next run's abort removes as the during_abort
# kill's re-run does.
SCENARIOS[SHORT_CHAINED] = [
    f"after_manifest:{CRASH_BATCH}",
    f"during_abort:{CRASH_BATCH}",
    f"before_publish:{CRASH_BATCH + 1}",
    f"during_publish:{CRASH_BATCH + 2}",
    None,
]
CHAINS = {CHAINED, SHORT_CHAINED}
CHAINED_TRANSACTIONS = 70  # enough changes for CRASH_BATCH + 5 batches of CAP, with room
RESTORED_FILE = "hook-restored.jsonl"  # in the scenario's workdir: what the hook was handed back
HOOK_DIR = "CRASH_HARNESS_HOOK_DIR"  # environment: the local directory for RESTORED_FILE


@dataclass
class Outcome:
    """What one scenario run found."""

    scenario: str
    lost: int
    duplicated: int
    torn: int
    versions: int
    fired: list[str] = field(default_factory=list)
    """The faults that killed a driver, in order (``point:batch``)."""

    @property
    def crashes(self) -> int:
        """How many drivers were killed."""
        return len(self.fired)


@dataclass
class Settings:
    """How a driver starts (JSON on its argv).

    Extra Spark configuration, Maven packages, whether Spark needs its s3a connector, and the
    ``txn-cdc`` options when the source is not the Debezium log given as LOG
    (``{"connector": "postgres", ...}``).
    """

    conf: dict[str, str] = field(default_factory=dict)
    packages: list[str] = field(default_factory=list)
    source: dict[str, str] = field(default_factory=dict)
    s3a: bool = False
    sink: dict[str, str] = field(default_factory=dict)
    """Extra ``delta-2pc`` options (``{"mode": "mirror"}``)."""

    def to_json(self) -> str:
        """For the driver's command line."""
        return json.dumps(
            {
                "conf": self.conf,
                "packages": self.packages,
                "source": self.source,
                "s3a": self.s3a,
                "sink": self.sink,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Settings:
        """Read :meth:`to_json`'s form."""
        body = json.loads(text)
        return cls(
            dict(body["conf"]),
            list(body["packages"]),
            dict(body.get("source", {})),
            bool(body.get("s3a", False)),
            dict(body.get("sink", {})),
        )


@dataclass
class Store:
    """Where a scenario keeps its log, table and checkpoint: a local directory or S3.

    ``root`` is a local directory or an ``s3a://bucket/prefix`` URI; ``storage`` the options
    that reach it (S3), ``settings`` what a driver needs for it (s3a keys, hadoop-aws).
    """

    root: str
    storage: dict[str, str] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)

    def uri(self, name: str) -> str:
        """The location of ``name`` (``log``, ``table``, ``ckpt``) in the store."""
        return f"{self.root.rstrip('/')}/{name}"

    @classmethod
    def on_s3(cls, server: Any, bucket: str, prefix: str) -> Store:
        """A store on ``server`` (:class:`harness.servers.s3.S3Server`) under ``s3a://bucket/prefix``."""
        return cls(
            f"s3a://{bucket}/{prefix}", server.options(), Settings(server.spark_conf(), s3a=True)
        )


def make_log(
    directory: Path | str, seed: int, transactions: int = 40, **storage: str
) -> list[list[str]]:
    """Write a change log; return each transaction's change notes, in END order.

    ``directory`` is a local path or an object-store URI reached with ``storage``.
    """
    import tempfile

    from spark_ckpt.state.storage import Location, StorageOptions
    from spark_ckpt.testing.debezium_log import random_log, write_log

    rng = random.Random(seed)
    records, expected = random_log(rng, transactions, max_size=10, interleave=4)
    splits = sorted(rng.sample(range(len(records)), 3))
    target = Location(str(directory), StorageOptions.of(storage))
    if target.is_local:
        write_log(target.path, records, splits)
    else:
        with tempfile.TemporaryDirectory() as staging:
            write_log(staging, records, splits)
            for name in sorted(os.listdir(staging)):
                target.child(name).write_bytes(Path(staging, name).read_bytes())
    return [[e["after"]["note"] for e in txn.events] for txn in expected]


def _hook() -> Any:
    """A checkpoint hook storing ``"at <N>"`` and appending what it is handed back to a file."""
    from spark_ckpt.state.hooks import CheckpointHook

    class Recorder(CheckpointHook):
        identifier = "crash-recorder"

        def trigger(self, checkpoint_id: int, timestamp: float) -> bytes | None:
            return f"at {checkpoint_id}".encode()

        def restore(self, checkpoint_id: int, data: bytes | None) -> None:
            record = {"checkpoint": checkpoint_id, "data": None if data is None else data.decode()}
            path = Path(os.environ[HOOK_DIR]) / RESTORED_FILE
            with path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")

    return Recorder()


def bounded_query(spark: Any, log: str, table: str, settings: Settings | None = None) -> Any:
    """The drivers' query, its checkpoint location not set yet (a ``DataStreamWriter``)."""
    settings = settings or Settings()
    source = settings.source or {"connector": "debezium-json", "path": log}
    return (
        spark.readStream.format("txn-cdc")
        .option("maxChangesPerTrigger", str(CAP))
        .options(**source)
        .load()
        .writeStream.format("delta-2pc")
        .option("path", table)
        .options(**settings.sink)
        .trigger(availableNow=True)
    )


def drive(
    log: str,
    table: str,
    checkpoint: str,
    supervised: bool = False,
    settings: Settings | None = None,
    before: Callable[[Any], None] | None = None,
) -> None:
    """The driver: stream the log into the table to the end (a fault may kill it first).

    ``before(spark)`` runs in the driver's session before the query starts (a cluster probe).
    """
    import spark_ckpt

    settings = settings or Settings()
    conf = dict(settings.conf)
    master = conf.pop("spark.master", "local[2]")
    spark = spark_ckpt.local_session(
        "crash-driver", master=master, conf=conf, packages=settings.packages, s3a=settings.s3a
    )
    control = spark_ckpt.install(spark)
    if before is not None:
        before(spark)

    def build() -> Any:
        return bounded_query(spark, log, table, settings)

    if supervised:
        query = control.supervise(
            build, checkpoint_location=checkpoint, name="crash", hooks=[_hook()]
        )
        if not query.await_termination(600):
            raise SystemExit("the supervised query did not finish within 10 minutes")
    elif not control.await_termination(
        build().option("checkpointLocation", checkpoint).start(), 600
    ):
        raise SystemExit("the driver's query did not finish within 10 minutes")
    spark.stop()


def _reap_session(session: int) -> None:
    """Make sure no process of the driver's session outlives it (before the next run starts)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == session:
                    os.kill(int(entry), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue


def run_driver(
    log: Path | str,
    table: Path | str,
    checkpoint: Path | str,
    fault: str | None,
    supervised: bool = False,
    settings: Settings | None = None,
) -> int:
    """Run one driver in its own process group; return its exit status (-9: killed)."""
    mode = "drive-supervised" if supervised else "drive"
    args = ["-m", "harness.faults.crash", mode, str(log), str(table), str(checkpoint)]
    hook_dir = str(Path(checkpoint).parent) if "://" not in str(checkpoint) else os.getcwd()
    env = {HOOK_DIR: os.environ.get(HOOK_DIR, hook_dir)}
    return run_killable([*args, (settings or Settings()).to_json()], fault, **env)


def start_driver(
    args: list[str], fault: str | None, cwd: Path | None = None, **env_extra: str
) -> subprocess.Popen[bytes]:
    """Start ``python *args`` in a session of its own with ``fault`` armed (see run_killable).

    ``args`` start with the driver's module (``-m harness.faults.crash drive ...``): the harness
    is a package, imported from the ``tests/`` directory on ``sys.path``, so a driver runs as a
    module of it rather than as a file. ``cwd``: the driver's working directory (a cluster's, see
    ``SparkCluster.driver_directory``).
    """
    # A crash driver's JVM lives seconds: C1 only and a class-data-sharing archive
    # (jvm_archive) change how fast it starts, never what it does.
    env = jvm_archive.driver_env(dict(os.environ))
    env.pop("SPARK_CKPT_FAULT", None)
    if fault:
        env["SPARK_CKPT_FAULT"] = fault
    env.update(env_extra)
    # ``python -m`` puts the working directory first on sys.path: in a source checkout, its
    # spark_ckpt/ (which lacks the installed spark_ckpt.sources) would shadow the installed
    # package. PYTHONSAFEPATH keeps it off (the tests set it; a benchmark may not have).
    env["PYTHONSAFEPATH"] = "1"
    return subprocess.Popen(
        [sys.executable, *args],
        env=env,
        cwd=cwd,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def finish_driver(process: subprocess.Popen[bytes], fault: str | None, timeout: float = 900) -> int:
    """Wait for a driver; reap its session; return its status (a failure raises)."""
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _reap_session(process.pid)
        raise
    _reap_session(process.pid)
    if process.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(
            f"driver (fault={fault}) exited with {process.returncode}:\n"
            + err.decode(errors="replace")[-4000:]
        )
    return process.returncode


def run_killable(
    args: list[str], fault: str | None, cwd: Path | None = None, **env_extra: str
) -> int:
    """Run ``python *args`` in a session of its own with ``fault`` armed; return its status."""
    return finish_driver(start_driver(args, fault, cwd, **env_extra), fault)


def verify(
    spark: Any,
    table: Path | str,
    expected: list[list[str]],
    storage: Mapping[str, str] | None = None,
) -> tuple[int, int, int, int]:
    """Count (lost, duplicated, torn, versions) of the table's every Delta version.

    What each version shows comes from the files the versions up to it added (read with delta-rs:
    :func:`harness.workloads.delta_versions.rows_by_version`, one Parquet read per file instead of
    a Spark job per version); delta-spark reads the newest version, which must show the same
    rows. ``storage`` reaches a table on an object store (``spark`` must reach it too).
    """
    from harness.workloads.delta_versions import rows_by_version

    size_of = {note: len(txn) for txn in expected for note in txn}
    txn_of = {note: index for index, txn in enumerate(expected) for note in txn}
    by_version = rows_by_version(table, storage, columns=["after"])
    torn: set[int] = set()
    final: Counter[str] = Counter()
    for added in by_version:
        final.update(json.loads(row["after"])["note"] for row in added)
        per_txn: dict[int, int] = defaultdict(int)
        for note in final:
            per_txn[txn_of[note]] += 1
        torn |= {t for t, n in per_txn.items() if n != len(expected[t])}
    frame = spark.read.format("delta").load(str(table)).select("after")
    seen_by_spark = Counter(json.loads(row.after)["note"] for row in frame.collect())
    assert seen_by_spark == final, "delta-spark's newest version differs from the files added"
    lost = sum(1 for txn in expected if any(final[note] == 0 for note in txn))
    duplicated = sum(1 for txn in expected if any(final[note] > 1 for note in txn))
    assert all(size_of[n] for n in final)
    return lost, duplicated, len(torn), len(by_version)


def run_scenario(
    spark: Any, name: str, workdir: Path, seed: int, store: Store | None = None
) -> Outcome:
    """Run one scenario in ``workdir`` (or ``store``); the crashing runs must really crash.

    ``spark`` reads the table back (it must reach ``store``).
    """
    store = store or Store(str(workdir))
    log, table, checkpoint = store.uri("log"), store.uri("table"), store.uri("ckpt")
    transactions = CHAINED_TRANSACTIONS if name in CHAINS else 40
    expected = make_log(log, seed, transactions, **store.storage)
    os.environ[HOOK_DIR] = str(workdir)
    fired: list[str] = []
    for fault in SCENARIOS[name]:
        status = run_driver(log, table, checkpoint, fault, name in SUPERVISED, store.settings)
        if fault is not None and status != -signal.SIGKILL:
            raise RuntimeError(f"scenario {name}: the fault {fault} never fired")
        if fault is None and status != 0:
            raise RuntimeError(f"scenario {name}: the clean run was killed")
        if fault is not None:
            fired.append(fault)
    lost, duplicated, torn, versions = verify(spark, table, expected, store.storage)
    return Outcome(name, lost, duplicated, torn, versions, fired)


if __name__ == "__main__":
    if len(sys.argv) in (5, 6) and sys.argv[1] in ("drive", "drive-supervised"):
        settings = Settings.from_json(sys.argv[5]) if len(sys.argv) == 6 else None
        drive(*sys.argv[2:5], supervised=sys.argv[1] == "drive-supervised", settings=settings)
    else:
        raise SystemExit(
            "usage: python -m harness.faults.crash drive|drive-supervised LOG TABLE CHECKPOINT"
            " [SETTINGS]"
        )
