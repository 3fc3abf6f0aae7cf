"""A txn-cdc -> delta-2pc driver on a log Debezium writes, in a process a test can SIGKILL.

:mod:`harness.faults.crash` kills drivers that read a finished log with ``Trigger.availableNow``.
Here the log is still being written (:mod:`harness.workloads.debezium`), so the driver runs a
supervised ``processingTime`` query until it is told to stop: a stop file appears, and it drains
(every change in the log when the file appeared ends up published) and exits 0. A fault armed with
``SPARK_CKPT_FAULT`` (:mod:`spark_ckpt.testing.faults`) kills its whole session at a protocol point
first; started again on the same checkpoint, the supervisor restores the last completed checkpoint
and the query goes on::

    driver = DebeziumDriver(log, table, checkpoint, workdir)
    driver.start(fault="after_manifest:3", max_changes=100)
    driver.wait_killed(120)                  # the fault fired: exit -9
    driver.start(max_changes=500)            # same checkpoint
    ...                                      # wait until the table holds what is expected
    driver.stop(120)                         # stop file; drains, exits 0

:func:`delta_changes` reads the table back with delta-rs, every row with the Delta version that
added it (the sink only adds files), so a test can check that no version shows part of a
transaction without starting a JVM of its own; :func:`delta_txn_ids` is what a test polls until
the table has caught up.

:func:`mirror_log` mirrors a finished log (``delta-2pc`` ``mode=mirror``, ``availableNow``) in a
test's own session, and :func:`delta_mirrors` reads the mirrors back with delta-rs as of the
newest checkpoint in the root's index, as ``spark_ckpt.read_consistent`` does, without Spark.

Run as a module (``python -m harness.faults.debezium drive LOG TABLE CHECKPOINT STOP_FILE
MAX_CHANGES [SETTINGS]``) it is the driver itself. ``SETTINGS`` (JSON) may give the ``txn-cdc``
options of another source (``{"source": {"connector": "kafka", ...}}``: LOG is then unused) and
extra ``delta-2pc`` options (``{"sink": {"mode": "mirror"}}``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.faults import crash, jvm_archive

__all__ = [
    "DebeziumDriver",
    "delta_changes",
    "delta_mirrors",
    "delta_txn_ids",
    "drive",
    "mirror_log",
]

_POLL_S = 0.2
_LOG_TAIL_CHARS = 4000


def drive(
    log: str,
    table: str,
    checkpoint: str,
    stop_file: str,
    max_changes: int,
    source: Mapping[str, str] | None = None,
    sink: Mapping[str, str] | None = None,
) -> None:
    """The driver: stream ``log`` into ``table`` until ``stop_file`` exists, then drain and stop.

    ``source`` replaces the Debezium log with another source's ``txn-cdc`` options; ``sink``
    adds ``delta-2pc`` options. Runs in the child process, once per start. Exits through an
    exception (status 1) when the supervised query fails for good.
    """
    import spark_ckpt

    spark = spark_ckpt.local_session("debezium-driver")
    control = spark_ckpt.install(spark)

    def build() -> Any:
        reader = spark.readStream.format("txn-cdc").option("maxChangesPerTrigger", str(max_changes))
        if source:
            frame = reader.options(**source).load()
        else:
            frame = reader.option("connector", "debezium-json").load(log)
        return (
            frame.writeStream.format("delta-2pc")
            .option("path", table)
            .options(**(sink or {}))
            .trigger(processingTime="200 milliseconds")
        )

    query = control.supervise(build, checkpoint_location=checkpoint, name="debezium-driver")
    stop = Path(stop_file)
    while not stop.exists():
        if query.await_termination(_POLL_S):  # raises if the query failed for good
            raise SystemExit("the supervised query ended before the stop file appeared")
    query.stop(drain=True, timeout=300)
    spark.stop()


class DebeziumDriver:
    """Start, kill and stop :func:`drive` processes on one log, table and checkpoint.

    Parameters
    ----------
    log, table, checkpoint
        The change-log directory, the Delta table and the checkpoint location (local paths).
    workdir
        Where the stop file and each run's stderr (``driver-<n>.log``) go (created).
    source
        ``txn-cdc`` options of another source than the Debezium log (``log`` is then unused).
    sink
        Extra ``delta-2pc`` options (``{"mode": "mirror"}``: ``table`` is the mirrors' root).
    """

    def __init__(
        self,
        log: str | os.PathLike[str],
        table: str | os.PathLike[str],
        checkpoint: str | os.PathLike[str],
        workdir: str | os.PathLike[str],
        *,
        source: Mapping[str, str] | None = None,
        sink: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = json.dumps({"source": dict(source or {}), "sink": dict(sink or {})})
        self.log = Path(log)
        self.table = Path(table)
        self.checkpoint = Path(checkpoint)
        self.workdir = Path(workdir)
        self.stop_file = self.workdir / "stop"
        self.runs = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._fault: str | None = None

    @property
    def stderr_file(self) -> Path:
        """The current (or last) run's stderr."""
        return self.workdir / f"driver-{self.runs}.log"

    def start(self, *, fault: str | None = None, max_changes: int = 500) -> DebeziumDriver:
        """Start a driver in a session of its own, ``fault`` armed (``point:batch``), at once.

        Raises
        ------
        RuntimeError
            If a driver of this object still runs.
        """
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError("a driver is still running; stop() or kill() it first")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.stop_file.unlink(missing_ok=True)
        self.runs += 1
        env = jvm_archive.driver_env(dict(os.environ))  # C1 only, the class archive
        env.pop("SPARK_CKPT_FAULT", None)
        if fault:
            env["SPARK_CKPT_FAULT"] = fault
        env["PYTHONSAFEPATH"] = "1"  # the working directory off sys.path (crash.start_driver)
        args = [
            "-m",
            "harness.faults.debezium",
            "drive",
            str(self.log),
            str(self.table),
            str(self.checkpoint),
            str(self.stop_file),
            str(max_changes),
            self.settings,
        ]
        with self.stderr_file.open("wb") as stderr:
            self._process = subprocess.Popen(
                [sys.executable, *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,  # a file, not a pipe: nobody reads while the driver runs
                start_new_session=True,  # the fault kills this session only
            )
        self._fault = fault
        return self

    @property
    def running(self) -> bool:
        """Whether the current driver process is alive."""
        return self._process is not None and self._process.poll() is None

    def wait_killed(self, timeout: float) -> None:
        """Wait (bounded) for the armed fault to SIGKILL the driver.

        Raises
        ------
        RuntimeError
            If it exits otherwise, or still runs after ``timeout`` seconds (then it is killed).
        """
        code = self._wait(timeout, f"the fault {self._fault} to fire")
        if code != -signal.SIGKILL:
            raise RuntimeError(
                f"the driver armed with {self._fault} exited with {code} instead of being "
                f"killed; stderr {self.stderr_file}:\n{self.stderr_tail()}"
            )

    def stop(self, timeout: float) -> None:
        """Create the stop file and wait (bounded) for the driver to drain and exit 0.

        Raises
        ------
        RuntimeError
            If it exits with another status, or still runs after ``timeout`` seconds (then it
            is killed).
        """
        self.stop_file.touch()
        code = self._wait(timeout, "the drain and a clean exit")
        if code != 0:
            raise RuntimeError(
                f"the driver exited with {code} after the stop file; stderr "
                f"{self.stderr_file}:\n{self.stderr_tail()}"
            )

    def kill(self) -> None:
        """SIGKILL every process of the driver's session (no-op when none runs)."""
        process = self._process
        if process is None:
            return
        crash._reap_session(process.pid)  # its session sweep, reused
        process.wait(30)

    def _wait(self, timeout: float, what: str) -> int:
        process = self._process
        if process is None:
            raise RuntimeError("no driver was started")
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(
                f"the driver did not finish within {timeout:.0f}s waiting for {what} (killed); "
                f"stderr {self.stderr_file}:\n{self.stderr_tail()}"
            ) from None
        # Spark's Python workers live in process groups of their own, in the same session.
        crash._reap_session(process.pid)
        return code

    def stderr_tail(self, chars: int = _LOG_TAIL_CHARS) -> str:
        """The end of the current run's stderr."""
        try:
            return self.stderr_file.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no stderr)"


def delta_txn_ids(table: str | os.PathLike[str]) -> set[str]:
    """The transaction ids in the Delta table now (delta-rs; empty before its first version).

    Cheap enough to poll: it reads the ``txn_id`` column only.
    """
    from deltalake import DeltaTable

    if not (Path(table) / "_delta_log").exists():
        return set()
    ids = DeltaTable(str(table)).to_pyarrow_table(columns=["txn_id"]).column("txn_id")
    return {str(txn_id) for txn_id in ids.to_pylist()}


def delta_changes(table: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every row of the Delta table, each with ``version``: the version that added its file.

    Read with delta-rs and pyarrow (no JVM): :func:`harness.workloads.delta_versions.added_rows`.

    Raises
    ------
    AssertionError
        If a version removed a file.
    """
    from harness.workloads.delta_versions import added_rows

    return added_rows(table)


def mirror_log(
    spark: Any,
    control: Any,
    log: str | os.PathLike[str],
    root: str | os.PathLike[str],
    checkpoint: str | os.PathLike[str],
    keys: Mapping[str, Sequence[str]],
    timeout: float = 240,
) -> None:
    """Mirror the whole of ``log`` under ``root`` (``availableNow``) and wait for the query.

    ``keys`` names each table as the change log does (``public.orders``) with its key columns,
    given as ``keyColumns``; the mirrors are typed from the envelopes (``columnTypes=true``).
    ``control`` is ``spark_ckpt.install(spark)``.

    Raises
    ------
    AssertionError
        If the query has not finished after ``timeout`` seconds.
    """
    key_columns = ";".join(f"{table}:{','.join(columns)}" for table, columns in keys.items())
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("columnTypes", "true")
        .option("keyColumns", key_columns)
        .option("maxChangesPerTrigger", "2000")
        .load(str(log))
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", str(root))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert control.await_termination(query, timeout), "the mirror query did not finish"


def delta_mirrors(root: str | os.PathLike[str]) -> dict[str, Any]:
    """Every mirror table under ``root`` as a pyarrow Table, by source table name (delta-rs).

    Each table is read at the version the checkpoint index (``_checkpoints``) records for its
    newest checkpoint: one consistent cut, as ``spark_ckpt.read_consistent`` reads it.

    Raises
    ------
    AssertionError
        If the root has no checkpoint index yet.
    """
    from harness.delta_reads import read_delta

    index_dir = Path(root) / "_checkpoints"
    assert (index_dir / "_delta_log").exists(), f"{root} has no checkpoint index"
    index = read_delta(str(index_dir)).to_pylist()
    newest = max(row["checkpoint_id"] for row in index)
    return {
        row["table"]: read_delta(str(Path(root) / row["path"]), int(row["version"]))
        for row in index
        if row["checkpoint_id"] == newest
    }


if __name__ == "__main__":
    if len(sys.argv) in (7, 8) and sys.argv[1] == "drive":
        log, table, checkpoint, stop_file, max_changes = sys.argv[2:7]
        settings = json.loads(sys.argv[7]) if len(sys.argv) == 8 else {}
        drive(
            log,
            table,
            checkpoint,
            stop_file,
            int(max_changes),
            settings.get("source"),
            settings.get("sink"),
        )
    else:
        raise SystemExit(
            "usage: python -m harness.faults.debezium drive LOG TABLE CHECKPOINT STOP_FILE"
            " MAX_CHANGES [SETTINGS]"
        )
