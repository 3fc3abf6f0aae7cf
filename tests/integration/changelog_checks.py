"""What the Debezium integration tests check of a change log in Delta, in one place.

Rows come from ``harness.faults.debezium.delta_changes`` (each with the Delta ``version`` that added
it).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from spark_ckpt.model.schema_changes import SCHEMA_CHANGE_OP

Row = dict[str, Any]
Folded = dict[str, dict[tuple[Any, ...], dict[str, Any]]]


def whole_once(rows: Iterable[Row]) -> dict[str, list[Row]]:
    """Group rows by transaction; assert each is in exactly one Delta version, whole, once."""
    by_txn: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_txn[row["txn_id"]].append(row)
    for txn_id, txn_rows in by_txn.items():
        versions = {r["version"] for r in txn_rows}
        assert len(versions) == 1, f"transaction {txn_id} is split over versions {versions}"
        indexes = sorted(r["event_index"] for r in txn_rows)
        assert indexes == list(range(txn_rows[0]["txn_size"])), f"{txn_id}: events {indexes}"
    return dict(by_txn)


def fold(
    rows: Sequence[Row],
    keys: Mapping[str, Sequence[str]],
    value: Callable[[str, Any], Any],
    table_of: Callable[[str], str] = lambda name: name,
    defaults: Mapping[str, Mapping[str, Any]] | None = None,
) -> Folded:
    """Replay the change log by key, in commit order: each table's rows as it ends.

    ``value(column, v)`` reads a value as Debezium wrote it; ``table_of`` maps the ``table``
    column to a ``keys`` entry; ``defaults`` fills columns an image lacks (added later).
    """
    state: Folded = defaultdict(dict)
    for row in sorted(rows, key=lambda r: (r["txn_order"], r["event_index"])):
        if row["op"] == SCHEMA_CHANGE_OP:
            continue  # a schema change: the images after it say their columns
        name = table_of(row["table"])
        image = json.loads(row["before"] if row["op"] == "d" else row["after"])
        key = tuple(image[k] for k in keys[name])
        if row["op"] == "d":
            state[name].pop(key, None)
            continue
        for column, default in (defaults or {}).get(name, {}).items():
            image.setdefault(column, default)
        state[name][key] = {k: value(k, v) for k, v in image.items()}
    return state


def by_key(
    columns: Sequence[str],
    records: Iterable[Sequence[Any]],
    key_columns: Sequence[str],
    value: Callable[[str, Any], Any],
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """A source table's rows (``SELECT *``) by key, each value read with ``value``."""
    out = {}
    for values in records:
        record = {c: value(c, v) for c, v in zip(columns, values, strict=True)}
        out[tuple(record[k] for k in key_columns)] = record
    return out
