"""A real Debezium producer for tests and benchmarks: the ``debezium-writer`` peer, run from Python.

``tests/harness/peers/debezium-writer`` is a small Java program around Debezium's embedded engine
that writes every record's value, as Kafka Connect's JsonConverter renders it, as one line of JSONL
files published by atomic rename, the way an object-store sink writes them (see its README.md).
One source, two jars: Debezium 3.6.1.Final with the PostgreSQL and MySQL connectors
(``"postgres"``, ``"mysql"``), and Debezium 3.5.0.Final with the MariaDB connector
(``"mariadb"``; that connector has no later release). Records are marked processed with the
engine only once their file is published, and only up to a transaction boundary (a transaction's
``END``, or a record outside any transaction), so a SIGKILL makes Debezium repeat the unpublished
tail and possibly more, at least the whole open transaction: at-least-once, which is what the
tests provoke.

``writer_jar(connector)`` builds the shaded jar that connector needs, once (Maven, with the
project-local repository ``.cache/maven``), and ``DebeziumWriter`` runs it::

    writer = DebeziumWriter("postgres", out_dir, state_dir, host="127.0.0.1", port=cluster.port,
                            user="spark", password=pw, database="postgres",
                            tables="public.orders,public.items")
    writer.start()                 # returns once the connector's task runs ({"ready": true})
    ...                            # transactions
    writer.wait_idle(1.0)          # no new file for a second
    writer.kill()                  # SIGKILL: the in-progress file is lost, offsets lag
    writer.restart()               # Debezium repeats from its last flushed offset
    writer.stop()                  # SIGTERM: publish, flush offsets, exit 0

The password goes to the JVM through its environment, never its command line, and never appears
in a message this module raises.

``out_dir`` may also be an ``s3://bucket/prefix`` URL: the writer then publishes each file as one
S3 object (``PutObject`` of the whole file) under ``prefix/NNNNNNNNNN.jsonl``, credentials and
region from the AWS default chains (pass them in ``env``: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL``), ``s3_path_style=True`` for
MinIO or moto::

    writer = DebeziumWriter("postgres", "s3://bucket/cdc/", state_dir, ..., s3_path_style=True,
                            env={"AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1", ...})
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from harness import PEERS
from harness.servers.maven import build_once

__all__ = ["DebeziumWriter", "writer_jar"]

PROJECT = PEERS / "debezium-writer"
JAR = PROJECT / "target" / "debezium-writer.jar"
"""Debezium 3.6.1.Final, PostgreSQL and MySQL connectors (the default Maven build)."""
MARIADB_JAR = PROJECT / "target" / "debezium-jsonl-writer-mariadb.jar"
"""Debezium 3.5.0.Final, MariaDB connector (``mvn -Pmariadb``)."""
CONNECTORS = ("postgres", "mariadb", "mysql")
PASSWORD_ENV = "DEBEZIUM_WRITER_PASSWORD"
FINAL_NAME = re.compile(r"^\d{10}\.jsonl$")
S3_SCHEMES = ("s3://", "s3a://")
_SECRET_ENV = re.compile(r"SECRET|TOKEN|PASSWORD|KEY", re.IGNORECASE)

_LOG_TAIL_CHARS = 4000


def writer_jar(connector: str = "postgres") -> Path:
    """The runnable writer jar for ``connector``, built first if missing or older than its sources.

    Only the jar ``connector`` needs is built: ``"postgres"``/``"mysql"`` the default build
    (Debezium 3.6.1.Final), ``"mariadb"`` the ``mariadb`` profile (Debezium 3.5.0.Final). Builds
    with ``mvn -q -B -Dmaven.repo.local=<repo>/.cache/maven -DskipTests [-Pmariadb] package``
    under an exclusive file lock (one for both jars: they share the Maven repository), so
    concurrent callers (pytest-xdist workers, benchmarks) build once.

    Parameters
    ----------
    connector
        ``"postgres"``, ``"mysql"`` or ``"mariadb"``.

    Returns
    -------
    Path
        ``tests/harness/peers/debezium-writer/target/debezium-writer.jar``, or for ``"mariadb"``
        ``target/debezium-jsonl-writer-mariadb.jar``.

    Raises
    ------
    ValueError
        For an unknown connector.
    RuntimeError
        If ``mvn`` or ``java`` is missing, or the build fails (with the end of Maven's output).
    """
    if connector not in CONNECTORS:
        raise ValueError(f"connector must be one of {', '.join(CONNECTORS)}, got {connector!r}")
    mariadb = connector == "mariadb"
    goals = [*(["-Pmariadb"] if mariadb else []), "package"]
    return build_once(PROJECT, MARIADB_JAR if mariadb else JAR, goals, what="the Debezium writer")


class DebeziumWriter:
    """One ``debezium-writer`` JVM capturing a database into JSONL files (start, kill, restart).

    Parameters
    ----------
    connector
        ``"postgres"`` (Debezium 3.6.1.Final), ``"mariadb"`` (Debezium 3.5.0.Final's MariaDB
        connector, its own jar) or ``"mysql"`` (3.6.1's MySQL connector, for MySQL servers
        only: it refuses MariaDB). See the writer's README.md.
    out_dir
        Where the published ``NNNNNNNNNN.jsonl`` files appear (created), or an
        ``s3://bucket/prefix`` URL: each file is then one S3 object under the prefix (see
        ``s3_endpoint``, ``s3_path_style``, ``env``).
    state_dir
        Offsets (``offsets.dat``), MariaDB's schema history (``schema-history.dat``) and the
        JVM's stderr (``writer.log``, appended across restarts) (created). Keep it across
        ``kill()``/``restart()``: it is what makes Debezium resume instead of starting over.
    host, port, user, password, database
        The database to capture; ``password`` reaches the JVM through its environment only.
    tables
        Debezium's ``table.include.list`` (``"public.orders,public.items"``, or for MariaDB
        ``"shop.orders"``); ``None`` captures every table Debezium sees.
    schemas
        JsonConverter's ``schemas.enable``: values as ``{"schema": ..., "payload": ...}`` or bare.
    tombstones
        ``tombstones.on.delete``: a ``null`` line after each delete.
    snapshot_mode
        Debezium's ``snapshot.mode`` (``initial``, ``no_data``, ...).
    roll_records, roll_ms
        A file is published when it holds this many records or this long after its first one.
    offset_flush_ms
        ``offset.flush.interval.ms``.
    topic_prefix
        ``topic.prefix`` (appears in ``source.name`` and transaction ids' topics).
    slot, publication
        PostgreSQL replication slot and publication (defaults ``dbz_writer``/``dbz_writer_pub``).
    server_id
        MariaDB/MySQL replica server id (default: the writer picks one in 5400-6400).
    props
        Extra or overriding Debezium/engine properties (``--prop key=value``).
    heap
        The JVM's ``-Xmx``.
    s3_endpoint
        ``--s3-endpoint``: the S3 endpoint URL (default: ``AWS_ENDPOINT_URL_S3`` or
        ``AWS_ENDPOINT_URL`` from the environment, else AWS).
    s3_path_style
        ``--s3-path-style``: path-style requests, for MinIO and moto.
    s3_conditional_put
        ``--s3-conditional-put``: ``If-None-Match: *`` on each upload (a published key is never
        replaced); turn off only for a store that rejects the header.
    env
        Extra environment variables for the JVM (AWS credentials and region, ...), on top of
        this process's. Values of names with ``SECRET``, ``TOKEN``, ``PASSWORD`` or ``KEY`` are
        masked in :meth:`log_tail`.
    """

    def __init__(
        self,
        connector: str,
        out_dir: str | os.PathLike[str],
        state_dir: str | os.PathLike[str],
        *,
        host: str,
        port: int,
        user: str,
        password: str,
        database: str,
        tables: str | None = None,
        schemas: bool = True,
        tombstones: bool = True,
        snapshot_mode: str = "initial",
        roll_records: int = 500,
        roll_ms: int = 500,
        offset_flush_ms: int = 1000,
        topic_prefix: str = "dbz",
        slot: str | None = None,
        publication: str | None = None,
        server_id: int | None = None,
        props: Mapping[str, str] | None = None,
        heap: str = "256m",
        s3_endpoint: str | None = None,
        s3_path_style: bool = False,
        s3_conditional_put: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if connector not in CONNECTORS:
            raise ValueError(
                f"connector must be 'postgres', 'mariadb' or 'mysql', got {connector!r}"
            )
        self.connector = connector
        out = os.fspath(out_dir)
        self.s3 = out.startswith(S3_SCHEMES)
        self.out = out
        """The ``--out`` argument: a directory or an ``s3://`` URL."""
        self.out_dir = Path(out)
        """The output directory (meaningless for an ``s3://`` output: see ``out``)."""
        self.state_dir = Path(state_dir)
        self.offsets_file = self.state_dir / "offsets.dat"
        self.history_file = self.state_dir / "schema-history.dat"
        self.log_file = self.state_dir / "writer.log"
        self._password = password
        self._env = dict(env or {})
        args = [
            "--connector", connector,
            "--out", out if self.s3 else str(self.out_dir),
            "--offsets-file", str(self.offsets_file),
            "--host", host,
            "--port", str(port),
            "--user", user,
            "--password-env", PASSWORD_ENV,
            "--database", database,
            "--schemas", str(schemas).lower(),
            "--tombstones", str(tombstones).lower(),
            "--snapshot-mode", snapshot_mode,
            "--roll-records", str(roll_records),
            "--roll-ms", str(roll_ms),
            "--offset-flush-ms", str(offset_flush_ms),
            "--topic-prefix", topic_prefix,
        ]  # fmt: skip
        if tables:
            args += ["--tables", tables]
        if slot:
            args += ["--slot", slot]
        if publication:
            args += ["--publication", publication]
        if connector != "postgres":
            args += ["--history-file", str(self.history_file)]
            if server_id is not None:
                args += ["--server-id", str(server_id)]
        if self.s3:
            if s3_endpoint:
                args += ["--s3-endpoint", s3_endpoint]
            args += ["--s3-path-style", str(s3_path_style).lower()]
            args += ["--s3-conditional-put", str(s3_conditional_put).lower()]
        for key, value in (props or {}).items():
            args += ["--prop", f"{key}={value}"]
        self._args = args
        self._heap = heap
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._changed = threading.Condition()
        self._ready = False
        self._eof = False
        self._files: dict[str, int] = {}
        self._last_file_at = time.monotonic()
        self.startup_seconds: float | None = None
        """Seconds from launching the JVM to ``{"ready": true}`` on the last ``start()``."""

    # -- process control ---------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the JVM is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def returncode(self) -> int | None:
        """The last JVM's exit status (``None`` while it runs or before the first start)."""
        return None if self._process is None else self._process.poll()

    def start(self, timeout: float = 120.0) -> DebeziumWriter:
        """Launch the JVM and wait (bounded) until the connector's task runs.

        Parameters
        ----------
        timeout
            Seconds to wait for ``{"ready": true}``.

        Returns
        -------
        DebeziumWriter
            ``self``.

        Raises
        ------
        RuntimeError
            If the writer is already running, or the JVM exits or stays unready for
            ``timeout`` seconds (the message carries the end of its log; the JVM is killed).
        """
        if self.running:
            raise RuntimeError("the Debezium writer is already running")
        jar = writer_jar(self.connector)
        if not self.s3:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._scan_out_dir()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        command = ["java", f"-Xmx{self._heap}", "-XX:+UseSerialGC", "-jar", str(jar), *self._args]
        env = {**os.environ, **self._env, PASSWORD_ENV: self._password}
        with self.log_file.open("a", encoding="utf-8") as log:
            log.write(f"--- debezium-writer start at {time.strftime('%H:%M:%S')} ---\n")
            log.flush()
            began = time.monotonic()
            self._ready = False
            self._eof = False
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                text=True,
                encoding="utf-8",
                start_new_session=True,  # a test's SIGKILL of its own process group spares it
            )
        _RUNNING.add(self)
        stdout = self._process.stdout
        assert stdout is not None
        self._reader = threading.Thread(
            target=self._read_stdout, args=(stdout,), name="debezium-writer-stdout", daemon=True
        )
        self._reader.start()
        deadline = began + timeout
        with self._changed:
            while not self._ready:
                if self._eof or self._process.poll() is not None:
                    code = self._process.wait()
                    raise RuntimeError(
                        f"the Debezium writer exited with {code} before it was ready; "
                        f"log {self.log_file}:\n{self.log_tail()}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self.kill()
                    raise RuntimeError(
                        f"the Debezium writer was not ready within {timeout:.0f}s (killed); "
                        f"log {self.log_file}:\n{self.log_tail()}"
                    )
                self._changed.wait(min(remaining, 0.5))
        self.startup_seconds = time.monotonic() - began
        return self

    def kill(self) -> None:
        """SIGKILL the JVM and reap it: its in-progress file is lost, its offsets lag."""
        if self._process is None:
            return
        if self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.send_signal(signal.SIGKILL)
        self._reap(30.0)

    def stop(self, timeout: float = 90.0) -> None:
        """SIGTERM: the writer publishes its in-progress file, flushes offsets and exits.

        Parameters
        ----------
        timeout
            Seconds to wait for the exit; after that the JVM is killed.

        Raises
        ------
        RuntimeError
            If the JVM did not exit in time or exited with a non-zero status.
        """
        if self._process is None or self._process.poll() is not None:
            self._reap(5.0)
            return
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(
                f"the Debezium writer did not stop within {timeout:.0f}s of SIGTERM (killed); "
                f"log {self.log_file}:\n{self.log_tail()}"
            ) from None
        self._reap(10.0)
        if self._process.returncode != 0:
            raise RuntimeError(
                f"the Debezium writer exited with {self._process.returncode} on SIGTERM; "
                f"log {self.log_file}:\n{self.log_tail()}"
            )

    def restart(self, timeout: float = 120.0) -> DebeziumWriter:
        """Stop the JVM if it runs (gracefully), then ``start(timeout)`` again."""
        if self.running:
            self.stop()
        return self.start(timeout)

    def close(self) -> None:
        """Stop gracefully if running, killing it if that fails; never raises for the JVM."""
        if self.running:
            try:
                self.stop()
            except RuntimeError:
                self.kill()

    def __enter__(self) -> DebeziumWriter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reap(self, timeout: float) -> None:
        process = self._process
        if process is None:
            return
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if self._reader is not None:
            self._reader.join(timeout)
        _RUNNING.discard(self)

    # -- what it published -------------------------------------------------------------------

    def _read_stdout(self, stdout: IO[str]) -> None:
        for line in stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # the writer prints nothing else; ignore rather than die
            with self._changed:
                if message.get("ready"):
                    self._ready = True
                elif "file" in message:
                    self._files[str(message["file"])] = int(message["records"])
                    self._last_file_at = time.monotonic()
                self._changed.notify_all()
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    def _scan_out_dir(self) -> None:
        # Files published before this object started (another run, another object) count too.
        with self._changed:
            for path in self.out_dir.iterdir():
                if FINAL_NAME.match(path.name) and path.name not in self._files:
                    with path.open("rb") as f:
                        self._files[path.name] = sum(1 for _ in f)

    def published_names(self) -> list[str]:
        """The names of the files published (seen by this object), in write order.

        For an ``s3://`` output, the keys are ``<prefix>/<name>``; only files this object saw
        published count (an S3 prefix is not scanned at start).
        """
        with self._changed:
            return sorted(self._files)

    def files(self) -> list[Path]:
        """The published files, in write order (a local output only)."""
        if self.s3:
            raise RuntimeError(
                f"the writer publishes to {self.out}: read the objects with an S3 client "
                "(published_names() gives their names)"
            )
        return [self.out_dir / name for name in self.published_names()]

    def published_records(self) -> int:
        """Records (lines) in all published files, across restarts."""
        with self._changed:
            return sum(self._files.values())

    def read_values(self) -> Iterator[Any]:
        """Every published line, parsed (``None`` for a tombstone), in write order."""
        for path in self.files():
            with path.open(encoding="utf-8") as f:
                for line in f:
                    yield json.loads(line)

    def wait_for_records(self, n: int, timeout: float = 60.0) -> int:
        """Block until at least ``n`` records are published; return the count.

        Raises
        ------
        RuntimeError
            If the JVM exits first, or ``timeout`` seconds pass (with the count and log tail).
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                count = sum(self._files.values())
                if count >= n:
                    return count
                self._check_alive(f"while waiting for {n} records (have {count})")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(
                        f"the Debezium writer published {count} of {n} records within "
                        f"{timeout:.0f}s; log {self.log_file}:\n{self.log_tail()}"
                    )
                self._changed.wait(min(remaining, 0.5))

    def wait_offsets_past_snapshot(self, timeout: float = 60.0) -> None:
        """Block until Debezium's flushed offsets are past its initial snapshot.

        Killed before that, Debezium finds no finished snapshot in its offsets and takes the
        snapshot again when it restarts: a lost-offsets restart, which a reader rightly refuses
        after streamed changes (``RepeatedSnapshotError``). A crash test that wants ordinary
        repeats waits here first. The offsets file (Kafka Connect's ``FileOffsetBackingStore``,
        a serialized map of JSON texts) then holds a streaming offset: PostgreSQL's
        ``lsn_proc``, or the binlog ``gtids`` MySQL and MariaDB record while streaming.

        Raises
        ------
        RuntimeError
            If the JVM exits first, or no such offset is flushed within ``timeout`` seconds.
        """
        markers = (b"lsn_proc",) if self.connector == "postgres" else (b"gtids", b'"pos"')
        deadline = time.monotonic() + timeout
        while True:
            try:
                data = self.offsets_file.read_bytes()
            except FileNotFoundError:
                data = b""
            if any(marker in data for marker in markers) and b'"snapshot"' not in data:
                return
            with self._changed:
                self._check_alive("while waiting for its offsets to pass the snapshot")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Debezium flushed no offset past its snapshot within {timeout:.0f}s; log "
                    f"{self.log_file}:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def wait_idle(self, quiet_s: float = 2.0, timeout: float = 60.0) -> int:
        """Block until no new file was published for ``quiet_s`` seconds; return the count.

        Raises
        ------
        RuntimeError
            If the JVM exits first, or it keeps publishing for ``timeout`` seconds.
        """
        began = time.monotonic()
        deadline = began + timeout
        with self._changed:
            while True:
                now = time.monotonic()
                quiet_since = max(self._last_file_at, began)
                if now - quiet_since >= quiet_s:
                    return sum(self._files.values())
                self._check_alive("while waiting for it to go idle")
                if now > deadline:
                    raise RuntimeError(
                        f"the Debezium writer was still publishing after {timeout:.0f}s "
                        f"({sum(self._files.values())} records); log {self.log_file}:\n"
                        f"{self.log_tail()}"
                    )
                self._changed.wait(min(quiet_s - (now - quiet_since), deadline - now) + 0.01)

    def _check_alive(self, doing: str) -> None:
        # Dead once the JVM exited *and* its last stdout lines were read (EOF).
        if self._process is None or (self._eof and self._process.poll() is not None):
            code = None if self._process is None else self._process.returncode
            raise RuntimeError(
                f"the Debezium writer is not running (exit {code}) {doing}; "
                f"log {self.log_file}:\n{self.log_tail()}"
            )

    def log_tail(self, chars: int = _LOG_TAIL_CHARS) -> str:
        """The end of the JVM's stderr log, the password masked."""
        try:
            with self.log_file.open("rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - chars))
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return "(no log)"
        secrets = [self._password, *(v for k, v in self._env.items() if _SECRET_ENV.search(k))]
        for secret in secrets:
            if secret:
                text = text.replace(secret, "***")
        return text

    def __repr__(self) -> str:  # never the password
        return f"DebeziumWriter({self.connector!r}, out_dir={self.out!r}, running={self.running})"


_RUNNING: set[DebeziumWriter] = set()


@atexit.register
def _kill_leftovers() -> None:
    # A test that forgot to stop its writer must not leave a JVM behind.
    for writer in list(_RUNNING):
        writer.kill()


def main(argv: list[str] | None = None) -> int:
    """Run a writer in the foreground until Ctrl-C (manual use); see ``--help``."""
    parser = argparse.ArgumentParser(
        prog="python -m harness.workloads.debezium", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--build-only", action="store_true", help="build the connector's jar, print its path"
    )
    parser.add_argument("--connector", choices=CONNECTORS, default="postgres")
    parser.add_argument("--out", help="output directory of the JSONL files, or s3://bucket/prefix")
    parser.add_argument("--state", help="offsets, schema history and log directory")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int)
    parser.add_argument("--user")
    parser.add_argument("--database")
    parser.add_argument("--tables")
    parser.add_argument("--no-schemas", action="store_true")
    parser.add_argument("--snapshot-mode", default="initial")
    parser.add_argument("--prop", action="append", default=[], help="key=value, repeatable")
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL (default: $AWS_ENDPOINT_URL)")
    parser.add_argument("--s3-path-style", action="store_true", help="path-style S3 requests")
    args = parser.parse_args(argv)
    if args.build_only:
        print(writer_jar(args.connector))
        return 0
    for name in ("out", "state", "port", "user", "database"):
        if getattr(args, name) is None:
            parser.error(f"--{name} is required (the password comes from ${PASSWORD_ENV})")
    password = os.environ.get(PASSWORD_ENV)
    if password is None:
        parser.error(f"set ${PASSWORD_ENV} to the database password")
    writer = DebeziumWriter(
        args.connector,
        args.out,
        args.state,
        host=args.host,
        port=args.port,
        user=args.user,
        password=password,
        database=args.database,
        tables=args.tables,
        schemas=not args.no_schemas,
        snapshot_mode=args.snapshot_mode,
        props=dict(p.split("=", 1) for p in args.prop),
        s3_endpoint=args.s3_endpoint,
        s3_path_style=args.s3_path_style,
    ).start()
    print(f"ready after {writer.startup_seconds:.1f}s; writing to {writer.out}", flush=True)
    seen = 0
    try:
        while writer.running:
            time.sleep(0.5)
            count = writer.published_records()
            if count != seen:
                print(f"{count} records in {len(writer.published_names())} files", flush=True)
                seen = count
    except KeyboardInterrupt:
        writer.stop()
    return 0 if writer.returncode in (0, None) else 1


if __name__ == "__main__":
    sys.exit(main())
