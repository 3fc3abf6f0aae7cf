"""One MariaDB server for the whole integration session, and a fresh database per test.

A plugin module rather than part of conftest.py; conftest.py brings the fixtures in with
``from mariadb_fixtures import mariadb_database, mariadb_server``.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator

import pytest

from harness.servers.mariadb import MariaDbServer


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[MariaDbServer]:
    """A real MariaDB server with a row-based binlog and GTIDs on loopback, stopped at the end."""
    # Not under pytest's tmp_path: its parents are private to root, and the server runs as the
    # mysql user when the tests run as root.
    server = MariaDbServer(tempfile.mkdtemp(prefix="spark-ckpt-mariadb-")).start()
    yield server
    server.stop()
    shutil.rmtree(server.workdir, ignore_errors=True)


@pytest.fixture
def mariadb_database(mariadb_server: MariaDbServer) -> Iterator[str]:
    """A fresh database for one test, ``spark`` may do anything in it; yields its name, drops it."""
    name = f"t_{uuid.uuid4().hex[:10]}"
    mariadb_server.create_database(name)
    yield name
    mariadb_server.drop_database(name)
