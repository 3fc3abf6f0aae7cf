"""A throwaway PostgreSQL cluster with logical decoding, for tests and benchmarks.

``PgCluster(workdir).start()`` runs ``initdb`` and ``pg_ctl`` from the installed PostgreSQL
(Debian's ``postgresql-15`` by default) with ``wal_level=logical`` on 127.0.0.1 at a free port,
password authentication for TCP, and ``wal2json`` allowed as an output plugin, and ``stop()``
shuts it down. PostgreSQL refuses to run as root, so as root the server runs as the ``postgres``
user the Debian package creates. ``scripts/setup.sh postgres`` installs the packages.

No mocks: this is the real server, only configured for throwaway use (``fsync=off``: a crash of
the *machine* may lose the cluster, which a test cluster may; a killed process loses nothing).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import time
from pathlib import Path

from harness.servers.loopback import free_port

__all__ = ["PgCluster", "find_bin_dir"]

USER = "spark"
PASSWORD = "s3cret-never-logged"  # the tests check that it never appears in errors or logs
PLUGIN = "wal2json"


def find_bin_dir() -> Path:
    """The directory of ``initdb`` / ``pg_ctl`` (``$PG_BIN``, else the newest Debian install)."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    if candidates:
        return Path(candidates[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise RuntimeError(
        "PostgreSQL is not installed: run scripts/setup.sh postgres (Debian: apt-get install "
        "postgresql-15 postgresql-15-wal2json), or set PG_BIN to the directory of initdb"
    )


def _version_key(path: str) -> int:
    part = path.split("/")[4]
    return int(part) if part.isdigit() else 0


class PgCluster:
    """One throwaway cluster under ``workdir``.

    Parameters
    ----------
    workdir
        A directory for the data directory, socket and log (created; must not hold a cluster).
        As root its parents must be traversable by the postgres user (``tempfile.mkdtemp()``
        itself is; a directory inside one is not).
    """

    def __init__(self, workdir: str | os.PathLike[str]) -> None:
        self.workdir = Path(workdir)
        self.data = self.workdir / "data"
        self.log = self.workdir / "server.log"
        self.bin = find_bin_dir()
        self.port = 0
        self._as_root = os.geteuid() == 0

    # -- process control ---------------------------------------------------------------------

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise RuntimeError(
                f"{args[0]} failed ({result.returncode}): {result.stderr.strip()[-2000:]}"
                + (f"\nserver log:\n{self.log.read_text()[-2000:]}" if self.log.exists() else "")
            )

    def start(self) -> PgCluster:
        """initdb, configure and start; return self once the server accepts connections."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            shutil.chown(self.workdir, "postgres")
        password_file = self.workdir / "pwfile"
        password_file.write_text(PASSWORD + "\n")
        if self._as_root:
            shutil.chown(password_file, "postgres")
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={password_file}",
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        )
        password_file.unlink()
        self.port = free_port()
        settings = {
            "wal_level": "logical",
            "max_replication_slots": "20",
            "max_wal_senders": "20",
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.workdir}'",
            "fsync": "off",
            "full_page_writes": "off",
            "timezone": "'UTC'",
        }
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        self._allow_plugin()
        return self

    def _allow_plugin(self) -> None:
        # Some Debian builds (15.20) only load output plugins listed in output_plugin_libraries
        # (REFERENCE.md); others (15.18) do not know the setting. Set it only where it exists,
        # unquoted through ALTER SYSTEM (a quoted list becomes one bogus element).
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            known = conn.execute(
                "SELECT 1 FROM pg_settings WHERE name = 'output_plugin_libraries'"
            ).fetchone()
            if known:
                conn.execute(
                    f"ALTER SYSTEM SET output_plugin_libraries = pgoutput, test_decoding, {PLUGIN}"
                )
                conn.execute("SELECT pg_reload_conf()")

    def stop(self) -> None:
        """Stop the server (fast shutdown); the data directory stays for post-mortems."""
        if self.port and (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError):
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def __enter__(self) -> PgCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connecting --------------------------------------------------------------------------

    def dsn(self, database: str = "postgres") -> str:
        """A libpq URI for the test user, password included."""
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until a connection succeeds (bounded)."""
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
