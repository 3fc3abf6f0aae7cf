"""Debezium-format records for the reader's tests: change events, BEGIN/END markers, files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def change(txn: str | None, order: int, op: str = "c", table: str | None = "t") -> dict[str, Any]:
    """A change event of ``public.<table>`` (no ``transaction`` block when ``txn`` is None)."""
    source: dict[str, Any] = {"schema": "public", "ts_ms": 1}
    if table is not None:
        source["table"] = table
    event: dict[str, Any] = {"op": op, "before": None, "after": {"id": order}, "source": source}
    if txn is not None:
        event["transaction"] = {"id": txn, "total_order": order, "data_collection_order": order}
    return event


def begin(txn: str) -> dict[str, Any]:
    return {"status": "BEGIN", "id": txn}


def end(txn: str, count: int) -> dict[str, Any]:
    return {"status": "END", "id": txn, "event_count": count}


def txn(txn_id: str, size: int = 2) -> list[object]:
    """A whole transaction: BEGIN, ``size`` change events, END."""
    return [begin(txn_id), *(change(txn_id, i + 1) for i in range(size)), end(txn_id, size)]


def text(lines: list[object]) -> str:
    """Records (or raw strings) as log text, one per line, each ending in a newline."""
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def write_lines(directory: Path, name: str, lines: list[object]) -> None:
    """Write ``lines`` as the log file ``directory/name`` (the directory is created)."""
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(text(lines))
