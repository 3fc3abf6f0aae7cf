"""What a MySQL or MariaDB DDL statement Debezium recorded says: column renames, a new table.

Debezium's MySQL and MariaDB connectors write each DDL statement they apply as a schema change
event (``ddl``: the statement as the server logged it, ``tableChanges``: the tables after it).
A Kafka Connect schema has no column identity, so a column renamed looks like one dropped and
one added; the statement says which. Two clauses rename a column (MySQL 8.0 reference manual,
"ALTER TABLE Statement"; MariaDB's knowledge base, "ALTER TABLE"):

- ``RENAME COLUMN old TO new`` (MySQL 8.0, MariaDB 10.5.2 and later);
- ``CHANGE [COLUMN] [IF EXISTS] old new column_definition``.

A ``CREATE TABLE`` statement says a table is new. Only those are read: the statement is split
into tokens (identifiers, quoted names, strings, comments, punctuation) and into its top-level
clauses, and a clause that starts otherwise is left alone. A general SQL parser is not used:
sqlglot, the well-kept one, parses ``CHANGE COLUMN`` as an unparsed command (sqlglot issue
5333), and nothing else of a statement is needed.
Pure; runs on the driver, once per schema change.
"""

from __future__ import annotations

import re

__all__ = ["altered_table", "creates_table", "renamed_columns"]

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
    | (?P<comment>/\*.*?\*/|--[^\n]*|\#[^\n]*)
    | (?P<quoted>`(?:[^`]|``)*`)
    | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
    | (?P<word>[\w$]+)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def _tokens(ddl: str) -> list[str]:
    out = []
    for match in _TOKEN.finditer(ddl):
        kind = match.lastgroup
        if kind in ("space", "comment"):
            continue
        out.append(match.group())
    return out


def _name(token: str) -> str:
    if token.startswith("`"):
        return token[1:-1].replace("``", "`")
    return token


def _clauses(tokens: list[str]) -> list[list[str]]:
    """The top-level comma-separated parts of ``tokens``."""
    parts: list[list[str]] = [[]]
    depth = 0
    for token in tokens:
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif token == "," and depth == 0:
            parts.append([])
            continue
        parts[-1].append(token)
    return parts


def _alter_parts(tokens: list[str]) -> tuple[list[str], list[str]] | None:
    """``ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] name body``: (name's parts, body), or None."""
    upper = [t.upper() for t in tokens]
    if not upper or upper[0] != "ALTER":
        return None
    i = 1
    while i < len(upper) and upper[i] in ("ONLINE", "OFFLINE", "IGNORE"):
        i += 1
    if i >= len(upper) or upper[i] != "TABLE":
        return None
    i += 1
    if upper[i : i + 2] == ["IF", "EXISTS"]:
        i += 2
    name = [_name(tokens[i])] if i < len(tokens) else []
    i += 1  # the table's name, perhaps qualified
    while i + 1 < len(tokens) and tokens[i] == ".":
        name.append(_name(tokens[i + 1]))
        i += 2
    return name, tokens[i:]


def _alter_body(tokens: list[str]) -> list[str] | None:
    """The tokens after ``ALTER [ONLINE] [IGNORE] TABLE [IF EXISTS] name``, or None."""
    parts = _alter_parts(tokens)
    return None if parts is None else parts[1]


def altered_table(ddl: str) -> tuple[str | None, str, bool] | None:
    """``(database or None, table, renames_table)`` of an ``ALTER TABLE``; None for others.

    ``renames_table``: a ``RENAME [TO|AS] new`` clause gives the table another name (a
    ``RENAME COLUMN`` or ``RENAME INDEX`` clause does not).
    """
    parts = _alter_parts(_tokens(ddl))
    if parts is None or not parts[0]:
        return None
    name, body = parts
    renames = any(
        [t.upper() for t in clause[:2]][:1] == ["RENAME"]
        and (len(clause) < 2 or clause[1].upper() not in ("COLUMN", "INDEX", "KEY"))
        for clause in _clauses(body)
    )
    database = name[0] if len(name) == 2 else None
    return database, name[-1], renames


def _rename(clause: list[str]) -> tuple[str, str] | None:
    upper = [t.upper() for t in clause]
    if upper[:2] == ["RENAME", "COLUMN"] and len(clause) >= 5 and upper[3] == "TO":
        return _name(clause[2]), _name(clause[4])
    if upper[:1] == ["CHANGE"]:
        rest = clause[1:]
        if rest and rest[0].upper() == "COLUMN":
            rest = rest[1:]
        if [t.upper() for t in rest[:2]] == ["IF", "EXISTS"]:
            rest = rest[2:]
        if len(rest) >= 2:
            return _name(rest[0]), _name(rest[1])
    return None


def creates_table(ddl: str) -> bool:
    """Whether ``ddl`` is a ``CREATE [OR REPLACE] [TEMPORARY] TABLE`` statement."""
    words = [t.upper() for t in _tokens(ddl)[:5]]
    if words[:1] != ["CREATE"]:
        return False
    rest = words[1:]
    if rest[:2] == ["OR", "REPLACE"]:
        rest = rest[2:]
    if rest[:1] == ["TEMPORARY"]:
        rest = rest[1:]
    return rest[:1] == ["TABLE"]


def renamed_columns(ddl: str) -> list[tuple[str, str]]:
    """``(old, new)`` for each column ``ddl`` renames, in order (empty: none, or not ALTER).

    ``CHANGE a a INT`` (a type change under the same name) is no rename and is left out.
    """
    body = _alter_body(_tokens(ddl))
    if body is None:
        return []
    out = []
    for clause in _clauses(body):
        pair = _rename(clause)
        if pair is not None and pair[0] != pair[1]:
            out.append(pair)
    return out
