"""Parsing one line of a Debezium-format change log.

A line is either a change event (``op`` in ``r``, ``c``, ``u``, ``d`` with ``before``, ``after``,
``source``, ``ts_ms`` and an optional ``transaction`` block) or a transaction-metadata event
(``status`` ``BEGIN``/``END`` with ``id``, and on ``END`` ``event_count`` and
``data_collections``). Lines in Kafka Connect's JSON envelope (``{"schema": ..., "payload": ...}``)
are unwrapped. Every problem is reported with the file and line.

Pure Python; runs on the driver (planning) and on executors (reading).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from spark_ckpt.errors import MalformedEventError, UnknownOperationError

from .log_files import LogLine

__all__ = ["OPERATIONS", "ChangeEvent", "TransactionMarker", "parse_line"]

OPERATIONS = frozenset({"r", "c", "u", "d"})
"""Debezium operations the source accepts: read (snapshot), create, update, delete."""

_CHANGE_SHAPE = (
    'a Debezium change event {"op": "c", "before": ..., "after": ..., "source": {...}, '
    '"transaction": {"id": ..., "total_order": ..., "data_collection_order": ...}} or a '
    'transaction event {"status": "BEGIN"|"END", "id": ..., "event_count": ...}'
)


class ChangeEvent(NamedTuple):
    """A row change, as read from the log.

    Attributes
    ----------
    txn_id
        The source transaction's id, or None for a change outside any transaction.
    total_order
        The event's 1-based position in its transaction (Debezium ``total_order``), if given.
    table
        ``schema.table`` (or ``db.table``) from the event's ``source`` block.
    op
        One of :data:`OPERATIONS`.
    ts_ms
        The source's commit time of the change (``source.ts_ms``, else ``ts_ms``), if given.
    event
        The whole event object (``before``, ``after``, ``key`` are taken from it when read).
    schema
        The Kafka Connect schema of a line written in the JSON envelope, else None.
    """

    txn_id: str | None
    total_order: int | None
    table: str
    op: str
    ts_ms: int | None
    event: dict[str, Any]
    schema: dict[str, Any] | None = None


class TransactionMarker(NamedTuple):
    """A Debezium transaction-metadata event.

    Attributes
    ----------
    status
        ``"BEGIN"`` or ``"END"``.
    txn_id
        The transaction's id.
    event_count
        On ``END``: the number of change events in the transaction.
    collections
        On ``END``: events per table (``data_collections``), when given.
    ts_ms
        The event's ``ts_ms``, when given.
    """

    status: str
    txn_id: str
    event_count: int | None
    collections: dict[str, int] | None
    ts_ms: int | None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _table_of(source: object) -> str:
    if not isinstance(source, dict):
        return ""
    table = source.get("table") or ""
    namespace = source.get("schema") or source.get("db") or ""
    return f"{namespace}.{table}" if namespace and table else str(table)


def _malformed(line: LogLine, problem: str) -> MalformedEventError:
    file, number = line.where
    return MalformedEventError(file, number, problem, _CHANGE_SHAPE)


def _parse_marker(line: LogLine, obj: dict[str, Any]) -> TransactionMarker:
    status = obj["status"]
    txn_id = obj.get("id")
    if not isinstance(txn_id, str) or not txn_id:
        raise _malformed(line, f"{status} event without a transaction id (field 'id')")
    if status == "BEGIN":
        return TransactionMarker("BEGIN", txn_id, None, None, _int_or_none(obj.get("ts_ms")))
    count = _int_or_none(obj.get("event_count"))
    if count is None or count < 0:
        raise _malformed(
            line,
            f"END of transaction {txn_id!r} has no valid event_count "
            f"(got {obj.get('event_count')!r})",
        )
    collections: dict[str, int] | None = None
    raw = obj.get("data_collections")
    if raw is not None:
        if not isinstance(raw, list):
            raise _malformed(line, f"END of transaction {txn_id!r}: data_collections is not a list")
        collections = {}
        for entry in raw:
            name = entry.get("data_collection") if isinstance(entry, dict) else None
            n = _int_or_none(entry.get("event_count")) if isinstance(entry, dict) else None
            if not isinstance(name, str) or n is None:
                raise _malformed(
                    line,
                    f"END of transaction {txn_id!r}: data_collections entry {entry!r} needs "
                    f"'data_collection' and 'event_count'",
                )
            collections[name] = collections.get(name, 0) + n
    return TransactionMarker("END", txn_id, count, collections, _int_or_none(obj.get("ts_ms")))


def parse_line(line: LogLine) -> ChangeEvent | TransactionMarker:
    """Parse and validate one log line.

    Raises
    ------
    MalformedEventError
        The line is not JSON, or not a change or transaction event.
    UnknownOperationError
        A change event's ``op`` is not one of ``r``, ``c``, ``u``, ``d``.
    """
    try:
        obj = json.loads(line.data)
    except ValueError as e:
        raise _malformed(line, f"not valid JSON ({e})") from e
    schema = None
    if isinstance(obj, dict) and "payload" in obj and "schema" in obj:
        schema = obj["schema"] if isinstance(obj["schema"], dict) else None
        obj = obj["payload"]
    if not isinstance(obj, dict):
        raise _malformed(line, f"a JSON {type(obj).__name__} is not an event object")
    status = obj.get("status")
    if status in ("BEGIN", "END"):
        return _parse_marker(line, obj)
    if "op" not in obj:
        raise _malformed(line, "the object has neither 'op' (change event) nor 'status'")
    op = obj["op"]
    if op not in OPERATIONS:
        file, number = line.where
        raise UnknownOperationError(
            file, number, f"unknown op {op!r}", "op to be one of 'r', 'c', 'u', 'd'"
        )
    source = obj.get("source")
    txn = obj.get("transaction")
    txn_id: str | None = None
    total_order: int | None = None
    if txn is not None:
        if not isinstance(txn, dict) or not isinstance(txn.get("id"), str) or not txn["id"]:
            raise _malformed(line, f"the 'transaction' block {txn!r} has no string 'id'")
        txn_id = txn["id"]
        total_order = _int_or_none(txn.get("total_order"))
        if "total_order" in txn and (total_order is None or total_order < 1):
            raise _malformed(
                line, f"transaction.total_order must be an integer >= 1, got {txn['total_order']!r}"
            )
    table = _table_of(source)
    if not table:
        # Every row change names its table; without one it could not be routed (partitionBy
        # table, mirror tables) and would land nowhere a reader looks.
        raise _malformed(
            line, "the change event names no table (field 'source.table' is missing or empty)"
        )
    ts = _int_or_none(source.get("ts_ms")) if isinstance(source, dict) else None
    if ts is None:
        ts = _int_or_none(obj.get("ts_ms"))
    return ChangeEvent(txn_id, total_order, table, op, ts, obj, schema)
