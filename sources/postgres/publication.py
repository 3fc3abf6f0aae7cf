"""The publication a pgoutput slot streams: created when missing, checked when it exists.

pgoutput decodes only tables in the publications it is given, and looks them up as of each
change's position in the WAL: a publication created after the slot would not cover the changes
before it. So the connector makes sure of the publication once per run, before it creates a
slot (driver).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from spark_ckpt.errors import TableCaptureError

from .connect import scrub
from .tables import TableInfo

__all__ = ["ensure_publication"]

_OPERATIONS = ("insert", "update", "delete", "truncate")


def ensure_publication(
    conn: psycopg.Connection[Any], dsn: str, name: str, tables: list[TableInfo]
) -> None:
    """Create publication ``name`` for ``tables``, or check that it publishes all they do.

    ``conn`` is in autocommit mode (driver, once per run).

    Raises
    ------
    TableCaptureError
        When it cannot be created (the user does not own the tables), or exists without a
        captured table or one of the operations; the message gives the SQL that fixes it.
    """
    row = conn.execute(
        "SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication "
        "WHERE pubname = %s",
        (name,),
    ).fetchone()
    listed = ", ".join(t.name for t in tables)
    if row is None:
        statement = sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
            sql.Identifier(name),
            sql.SQL(", ").join(sql.Identifier(t.schema, t.table) for t in tables),
        )
        try:
            conn.execute(statement)
        except psycopg.Error as e:
            raise TableCaptureError(
                f"cannot create publication {name!r} for {listed}: "
                f"{scrub(str(e).strip(), dsn)}. Have the tables' owner run CREATE PUBLICATION "
                f"{name} FOR TABLE {listed}, or name an existing one with the option "
                f"'publication'"
            ) from None
        return
    all_tables, *operations = row
    missing_ops = [op for op, on in zip(_OPERATIONS, operations, strict=True) if not on]
    if missing_ops:
        raise TableCaptureError(
            f"publication {name!r} does not publish {', '.join(missing_ops)}: those changes "
            f"would be lost. Run ALTER PUBLICATION {name} SET (publish = "
            f"'{', '.join(_OPERATIONS)}')"
        )
    if all_tables:
        return
    published = {
        f"{schema}.{table}"
        for schema, table in conn.execute(
            "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (name,)
        ).fetchall()
    }
    absent = [t.name for t in tables if t.name not in published]
    if absent:
        raise TableCaptureError(
            f"publication {name!r} does not publish {', '.join(absent)} (option 'tables'). Run "
            f"ALTER PUBLICATION {name} ADD TABLE {', '.join(absent)}; changes made before that "
            f"are not in the publication: start over with a new slot and snapshot=initial"
        )
