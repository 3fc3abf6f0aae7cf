"""Statements the binlog holds outside transactions (DDL), as the mysql connector takes them.

An ``ALTER TABLE`` of a captured table is followed (its column renames go to the schema
tracker; its table maps show the rest); any other statement naming a captured table (dropped,
truncated, created again, renamed) stops the query, since no row change can carry it. Statements
on other tables pass. Pure Python; runs on the driver.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from spark_ckpt.errors import UnsupportedChangeError

from ..debezium_format.mysql_ddl import altered_table

if TYPE_CHECKING:
    from .schemas import SchemaTracker
    from .transactions import Statement

__all__ = ["follow_statement"]


def follow_statement(statement: Statement, tables: tuple[str, ...], tracker: SchemaTracker) -> None:
    """Follow an ``ALTER TABLE`` of a captured table; stop at any other statement on one.

    The tracker learns an ALTER's column renames (its table maps show the rest). A table
    dropped, truncated, created again or renamed is a change the stream cannot carry as rows,
    so the query stops rather than let a mirror differ. Driver, per statement read outside a
    transaction (DDL).

    Raises
    ------
    UnsupportedChangeError
        When ``statement`` does to one of ``tables`` what no row change can carry.
    """
    altered = altered_table(statement.sql)
    for name in tables:
        database, table = name.split(".")
        in_database = statement.database.lower() == database.lower()
        if not _names(statement.sql, table) or not (in_database or _names(statement.sql, database)):
            continue
        if altered is not None and not altered[2] and _is(altered, name, statement):
            tracker.statement(name, statement.sql)
            continue
        if altered is not None and not _is(altered, name, statement):
            continue  # another table's ALTER naming this one (a foreign key to it)
        raise UnsupportedChangeError(
            f"the binlog at {statement.end} holds a statement on captured table {name} "
            f"that a change stream cannot carry as rows: {statement.sql[:200]!r}. The "
            f"mysql connector follows ALTER TABLE (columns added, dropped, renamed, "
            f"retyped); a table dropped, truncated, created again or renamed stops the "
            f"query rather than let a mirror differ: start a new query (new "
            f"checkpointLocation) after it"
        )


def _is(altered: tuple[str | None, str, bool], name: str, statement: Statement) -> bool:
    """Whether an ALTER's table (its database, else the statement's) is captured ``name``."""
    database = altered[0] if altered[0] is not None else statement.database
    return f"{database}.{altered[1]}".lower() == name.lower()


def _names(sql: str, identifier: str) -> bool:
    """Whether ``sql`` names ``identifier`` as a whole word (quoted or not, any case)."""
    return re.search(rf"(?<![\w$]){re.escape(identifier)}(?![\w$])", sql, re.IGNORECASE) is not None
