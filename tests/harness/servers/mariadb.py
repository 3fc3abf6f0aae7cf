"""A throwaway MariaDB server with a row-based binlog and GTIDs, for tests.

``MariaDbServer(workdir).start()`` runs ``mariadb-install-db`` and ``mariadbd`` from the installed
MariaDB (Debian's ``mariadb-server``, 10.11) on 127.0.0.1 at a free port, with its own socket,
pid file, error log and data directory under ``workdir`` and no option file but its own (nothing
is read from ``/etc/mysql``, and the system's MariaDB service is neither needed nor touched). The
binlog is configured as Debezium's MariaDB connector documents (``binlog_format=ROW``,
``binlog_row_image=FULL``, annotated row events, GTIDs in strict mode), and a user ``spark`` has
the privileges that connector documents. ``stop()`` shuts the server down. As root the server
runs as the ``mysql`` user the Debian package creates. ``scripts/setup.sh test`` installs the
packages.

No mocks: this is the real server, only configured for throwaway use
(``innodb_flush_log_at_trx_commit=2``, ``sync_binlog=0``: a crash of the *machine* may lose the
last commits or leave the binlog and the tables out of step, which a test server may; a killed
process loses nothing).

The tests talk to it through PyMySQL (``pip install PyMySQL``, in the ``test`` extra).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.servers.loopback import free_port

if TYPE_CHECKING:
    from pymysql.connections import Connection

__all__ = ["MariaDbServer", "find_mariadbd"]

USER = "spark"
PASSWORD = "m4riadb-s3cret-never-logged"  # the tests check that it never appears in errors or logs
SERVER_ID = 1
BINLOG_BASENAME = "mariadb-bin"

# What Debezium's MariaDB connector documents for its user (SELECT, RELOAD, SHOW DATABASES,
# REPLICATION SLAVE, REPLICATION CLIENT; LOCK TABLES where no global read lock is allowed).
# Since MariaDB 10.5 REPLICATION CLIENT is only an alias of BINLOG MONITOR (SHOW MASTER STATUS,
# SHOW BINARY LOGS), and SHOW SLAVE STATUS, which the documentation lists under it, needs
# REPLICA MONITOR: both are named so the grant says what it gives.
CDC_PRIVILEGES = (
    "SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT, BINLOG MONITOR, "
    "REPLICA MONITOR, LOCK TABLES"
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def find_mariadbd() -> Path:
    """The server binary (``$MARIADBD``, else Debian's ``/usr/sbin/mariadbd``, else ``PATH``)."""
    candidates = [os.environ.get("MARIADBD", ""), "/usr/sbin/mariadbd", shutil.which("mariadbd")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise RuntimeError(
        "MariaDB is not installed: run scripts/setup.sh test (Debian: apt-get install "
        "mariadb-server mariadb-client), or set MARIADBD to the path of mariadbd"
    )


def _find_install_db(mariadbd: Path) -> Path:
    for directory in (mariadbd.parent, mariadbd.parent.parent / "bin"):
        if (directory / "mariadb-install-db").exists():
            return directory / "mariadb-install-db"
    found = shutil.which("mariadb-install-db")
    if found:
        return Path(found)
    raise RuntimeError("mariadb-install-db not found beside mariadbd nor on PATH")


def _tail(path: Path, chars: int = 2000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def _name(name: str) -> str:
    """``name`` as a quoted identifier, once it is known to be a plain one."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"not a plain database name: {name!r}")
    return f"`{name}`"


class MariaDbServer:
    """One throwaway server under ``workdir``.

    Parameters
    ----------
    workdir
        A directory for the data directory, option file, socket, pid file and logs (created).
        As root its parents must be traversable by the mysql user (``tempfile.mkdtemp()``
        itself is; a directory inside one is not). Keep it short: the socket's path must fit
        in 107 bytes.

    Attributes
    ----------
    server_id
        The server's ``server_id`` (a replica needs its own: :meth:`replicate_from`).

    Attributes
    ----------
    host, port, user, password
        Where and as whom the tests and the connectors connect (``port`` is 0 until started).
    """

    def __init__(self, workdir: str | os.PathLike[str], server_id: int = SERVER_ID) -> None:
        self.workdir = Path(workdir)
        self.data = self.workdir / "data"
        self.config = self.workdir / "my.cnf"
        self.socket = self.workdir / "mariadbd.sock"
        self.pid_file = self.workdir / "mariadbd.pid"
        self.log = self.workdir / "error.log"
        self.output = self.workdir / "mariadbd.out"  # what the server prints before its log opens
        self.mariadbd = find_mariadbd()
        self.host = "127.0.0.1"
        self.port = 0
        self.user = USER
        self.password = PASSWORD
        self.server_id = server_id
        self._as_root = os.geteuid() == 0
        self._process: subprocess.Popen[bytes] | None = None

    # -- process control ---------------------------------------------------------------------

    def _write_config(self) -> None:
        settings = {
            "datadir": str(self.data),
            "socket": str(self.socket),
            "pid_file": str(self.pid_file),
            "log_error": str(self.log),
            "bind_address": self.host,
            "port": str(self.port),
            "skip_name_resolve": "ON",
            # The binlog as Debezium's MariaDB connector documents it.
            "server_id": str(self.server_id),
            "log_bin": BINLOG_BASENAME,
            "binlog_format": "ROW",
            "binlog_row_image": "FULL",
            "binlog_annotate_row_events": "ON",
            # The mysql connector decodes each row with the columns the table map names.
            "binlog_row_metadata": "FULL",
            "log_slave_updates": "ON",
            "gtid_strict_mode": "ON",
            # Throwaway durability: commits reach the OS, not the disk, before they return.
            "innodb_flush_log_at_trx_commit": "2",
            "sync_binlog": "0",
            "innodb_buffer_pool_dump_at_shutdown": "OFF",
            "innodb_buffer_pool_load_at_startup": "OFF",
            # Debian's own option files set these; this one is the only file read.
            "character_set_server": "utf8mb4",
            "collation_server": "utf8mb4_general_ci",
            "default_time_zone": "+00:00",
        }
        if self._as_root:
            settings["user"] = "mysql"
        lines = ["[mysqld]", *(f"{key} = {value}" for key, value in settings.items())]
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def _install(self) -> None:
        command = [
            str(_find_install_db(self.mariadbd)),
            f"--defaults-file={self.config}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--skip-name-resolve",
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise RuntimeError(
                f"mariadb-install-db failed ({result.returncode}): "
                f"{(result.stdout + result.stderr).strip()[-2000:]}"
                + (f"\nerror log:\n{_tail(self.log)}" if self.log.exists() else "")
            )

    def start(self, timeout: float = 60.0) -> MariaDbServer:
        """Initialise (first time only), configure and start; return self once it accepts.

        On a workdir whose data directory exists (after ``stop()``, or a killed server) it
        starts the server again on the same data, port and user. A server already running is
        left as it is (a second ``mariadbd`` on its data would be orphaned, never stopped).
        """
        if self._process is not None and self._process.poll() is None:
            return self
        fresh = not (self.data / "mysql").is_dir()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            shutil.chown(self.workdir, "mysql")
        if not self.port:
            self.port = free_port()
        self._write_config()
        if fresh:
            self._install()
        with self.output.open("ab") as output:
            self._process = subprocess.Popen(
                [str(self.mariadbd), f"--defaults-file={self.config}"],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a test's SIGKILL of its drivers' sessions spares it
            )
        try:
            self.wait_ready(timeout)
            if fresh:
                self._create_user()
        except BaseException:
            self.stop()
            raise
        return self

    def _create_user(self) -> None:
        with self.connect(admin=True) as conn, conn.cursor() as cursor:
            # MariaDB writes CREATE USER to the binlog as typed, password and all: keep the
            # setup out of it (which also leaves the binlog to what the tests do).
            cursor.execute("SET SESSION sql_log_bin = 0")
            # (With parameters PyMySQL formats the statement with %: '%%' is the host '%'.)
            cursor.execute(f"CREATE USER '{USER}'@'%%' IDENTIFIED BY %s", (PASSWORD,))
            cursor.execute(f"GRANT {CDC_PRIVILEGES} ON *.* TO '{USER}'@'%'")
            # Root without a password stays reachable through the socket only, which lies in
            # the workdir (the mysql user's): drop the TCP accounts mariadb-install-db made.
            cursor.execute(
                "SELECT Host FROM mysql.user WHERE User = 'root' AND Host <> 'localhost'"
            )
            for (host,) in cursor.fetchall():
                cursor.execute("DROP USER 'root'@%s", (host,))

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the server down cleanly (SIGTERM), or SIGKILL it after ``timeout`` seconds.

        The data directory stays, for post-mortems and for ``start()`` again.
        """
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL the server: a crash of the process (not the machine), so no commit is lost.

        ``start()`` brings it back on the same data, port and user.
        """
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=30)

    def __enter__(self) -> MariaDbServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the server accepts connections (bounded); fail with its log's tail."""
        import pymysql

        deadline = time.monotonic() + timeout
        while True:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(
                    f"mariadbd exited with {self._process.returncode} at start:\n"
                    f"{_tail(self.output, 500)}{_tail(self.log)}"
                )
            try:
                with self.connect(admin=True, connect_timeout=2):
                    return
            except pymysql.err.OperationalError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"mariadbd did not accept connections within {timeout:.0f}s ({e}):\n"
                        f"{_tail(self.output, 500)}{_tail(self.log)}"
                    ) from None
                time.sleep(0.1)

    # -- replication --------------------------------------------------------------------------

    def replicate_from(self, primary: MariaDbServer) -> None:
        """Make this (fresh) server a GTID replica of ``primary``, replicating from its start.

        Both servers log what they apply (``log_slave_updates``, in every server's option
        file) in GTID strict mode, so the replica's binlog has the primary's transactions under
        the same GTIDs, in files and positions of its own: what a failover to it needs.
        MariaDB's ``CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos`` with an empty
        ``gtid_slave_pos`` replicates the primary's binlog from its first GTID. ``spark``
        replicates (it has ``REPLICATION SLAVE``); its password goes only into the replica's
        ``master.info``, never to a log.
        """
        with self.connect(admin=True) as conn, conn.cursor() as cursor:
            cursor.execute("SET GLOBAL gtid_slave_pos = ''")
            cursor.execute(
                "CHANGE MASTER TO MASTER_HOST = %s, MASTER_PORT = %s, MASTER_USER = %s, "
                "MASTER_PASSWORD = %s, MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1",
                (primary.host, primary.port, primary.user, primary.password),
            )
            cursor.execute("START SLAVE")

    def wait_replicated(self, gtid: str, timeout: float = 30.0) -> None:
        """Block until this replica applied GTID state ``gtid`` (bounded; MASTER_GTID_WAIT)."""
        found = self.query("SELECT MASTER_GTID_WAIT(%s, %s)", params=(gtid, timeout), admin=True)
        if found[0][0] != 0:
            status = self.query("SHOW SLAVE STATUS", admin=True)
            raise RuntimeError(
                f"the replica did not apply GTID {gtid} within {timeout:.0f}s "
                f"(gtid_slave_pos {self.query('SELECT @@gtid_slave_pos', admin=True)[0][0]}): "
                f"{status}"
            )

    # -- connecting --------------------------------------------------------------------------

    def dsn_summary(self) -> str:
        """Where the server is and as whom to connect, for messages: never the password."""
        return f"mariadb://{self.user}@{self.host}:{self.port} (data {self.data})"

    def connect(
        self, database: str | None = None, *, admin: bool = False, connect_timeout: float = 10
    ) -> Connection[Any]:
        """A PyMySQL connection in autocommit mode (``conn.begin()`` opens a transaction).

        Parameters
        ----------
        database
            The default database, if any.
        admin
            Connect as root through the socket instead of as ``spark`` over TCP (for what the
            connector's user may not do: ``SET GLOBAL``, ``PURGE BINARY LOGS``, ...).
        connect_timeout
            Seconds to wait for the connection.
        """
        import pymysql

        if admin:
            return pymysql.connect(
                unix_socket=str(self.socket),
                user="root",
                database=database,
                autocommit=True,
                charset="utf8mb4",
                connect_timeout=connect_timeout,
            )
        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=database,
            autocommit=True,
            charset="utf8mb4",
            connect_timeout=connect_timeout,
        )

    def execute(
        self,
        sql: str,
        database: str | None = None,
        *,
        params: Sequence[Any] | None = None,
        admin: bool = False,
    ) -> int:
        """Run one statement on a connection of its own (autocommit); return its row count.

        ``params`` fill PyMySQL's ``%s`` placeholders; ``admin`` runs it as root.
        """
        with self.connect(database, admin=admin) as conn, conn.cursor() as cursor:
            return int(cursor.execute(sql, params))

    def query(
        self,
        sql: str,
        database: str | None = None,
        *,
        params: Sequence[Any] | None = None,
        admin: bool = False,
    ) -> list[tuple[Any, ...]]:
        """Run one statement on a connection of its own and return its rows."""
        with self.connect(database, admin=admin) as conn, conn.cursor() as cursor:
            cursor.execute(sql, params)
            return [tuple(row) for row in cursor.fetchall()]

    def create_database(self, name: str) -> None:
        """Create database ``name`` and give ``spark`` all privileges on it."""
        quoted = _name(name)
        self.execute(f"CREATE DATABASE {quoted}", admin=True)
        self.execute(f"GRANT ALL PRIVILEGES ON {quoted}.* TO '{USER}'@'%'", admin=True)

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` if it exists."""
        self.execute(f"DROP DATABASE IF EXISTS {_name(name)}", admin=True)


if __name__ == "__main__":  # a server for a manual session: python -m harness.servers.mariadb
    import tempfile

    server = MariaDbServer(tempfile.mkdtemp(prefix="spark-ckpt-mariadb-")).start()
    print(server.dsn_summary(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
