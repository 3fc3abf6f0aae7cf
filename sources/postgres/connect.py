"""Connecting to PostgreSQL without ever showing the password.

The ``dsn`` option may carry a password (a URI ``postgresql://user:secret@host/db`` or a
``password=...`` keyword). Every message this package produces about a connection uses
:func:`redact_dsn`, and errors raised by the driver are scrubbed of the password before they are
wrapped, so it reaches no log, error or progress event. Runs on the driver (reader process).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from spark_ckpt.errors import InvalidOptionError, SourceConnectionError

__all__ = ["connect", "quote_identifier", "redact_dsn", "scrub"]

_CONNECT_TIMEOUT_S = 10


def _parts(dsn: str) -> dict[str, Any]:
    try:
        return dict(conninfo_to_dict(dsn))
    except psycopg.ProgrammingError as e:
        # The parser's message quotes the DSN: do not repeat it.
        raise InvalidOptionError(
            "dsn",
            "<not shown: it may hold a password>",
            "a libpq connection string (host=... dbname=...) or URI (postgresql://user@host/db)",
        ) from e.with_traceback(None)


def redact_dsn(dsn: str) -> str:
    """``dsn`` with the password replaced by ``***`` (safe to print)."""
    parts = _parts(dsn)
    if "password" in parts:
        parts["password"] = "***"
    return make_conninfo(**parts)


def scrub(text: str, dsn: str) -> str:
    """Remove the DSN's password from ``text`` wherever it appears."""
    password = _parts(dsn).get("password")
    return text.replace(str(password), "***") if password else text


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """An autocommit connection (driver).

    Raises
    ------
    SourceConnectionError
        When the server cannot be reached or refuses the login; the message shows the redacted
        DSN and the server's reason.
    """
    kwargs.setdefault("autocommit", True)
    kwargs.setdefault("connect_timeout", _CONNECT_TIMEOUT_S)
    _parts(dsn)  # a malformed DSN is an option error, before anything is sent
    try:
        return psycopg.connect(dsn, **kwargs)
    except psycopg.Error as e:
        reason = scrub(str(e).strip(), dsn)
        raise SourceConnectionError(
            f"cannot connect to PostgreSQL at {redact_dsn(dsn)}: {reason}. Check the option "
            f"'dsn' (host, port, database, user, password) and that the server accepts "
            f"connections from this machine"
        ) from None


def quote_identifier(name: str) -> str:
    """``name`` as a double-quoted SQL identifier, for text that is not a parameter.

    A replication command's slot name and pgoutput's ``publication_names`` option are parsed by
    the server as identifiers, where a bind parameter cannot go: psycopg's own quoting (the one
    ``psycopg.sql`` composes queries with elsewhere), rendered without a connection.
    """
    return sql.Identifier(name).as_string()
