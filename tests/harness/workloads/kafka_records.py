"""Debezium's records as it writes them to Kafka, from the captured fixture.

``tests/fixtures/kafka/postgres-3.6.1`` holds every record Debezium 3.6.1 wrote through Kafka
Connect for a snapshot, six transactions, a Connect SIGKILL and its repeats, and an incremental
snapshot. ``fixture_records`` reads them back; ``debezium_transaction`` makes more transactions of
the same form (the fault tests' writer and ``bench/freshness.py`` send them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "kafka" / "postgres-3.6.1"
FIXTURE_PREFIX = "dbz"


def fixture_records() -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The fixture's records by (topic without the prefix, partition), in offset order."""
    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for path in sorted(FIXTURE.glob("*.jsonl")):
        topic, _, partition = path.stem.rpartition("-")
        name = topic.removeprefix(FIXTURE_PREFIX + ".")
        lines = path.read_text(encoding="utf-8").splitlines()
        out[(name, int(partition))] = [json.loads(line) for line in lines if line]
    return out


def _fixture_value(topic: str, partition: int, offset: int) -> dict[str, Any]:
    [record] = [r for r in fixture_records()[(topic, partition)] if r["offset"] == offset]
    value: dict[str, Any] = json.loads(record["value"])
    return value


def debezium_transaction(
    prefix: str, xid: int, lsn: int, ids: list[int], partitions: int
) -> list[tuple[str, int, bytes, bytes]]:
    """Debezium's records of a PostgreSQL transaction inserting orders ``ids``, in send order.

    Made from the fixture's records (its first transaction's BEGIN, END and order insert),
    with the transaction id ``<xid>:<lsn>`` and positions from ``lsn`` on (growing ``lsn`` from
    one transaction to the next, as PostgreSQL's commit LSNs grow): BEGIN and END to
    ``<prefix>.transaction`` (partition 0), each insert to ``<prefix>.public.orders``, partition
    ``id % partitions`` (as a key always goes to one partition). ``(topic, partition, key,
    value)`` each.
    """
    txn = f"{xid}:{lsn}"
    begin = _fixture_value("transaction", 0, 0)
    end = _fixture_value("transaction", 0, 1)
    change = _fixture_value("public.orders", 0, 3)
    begin["payload"]["id"] = txn
    end["payload"].update(
        id=txn,
        event_count=len(ids),
        data_collections=[{"data_collection": "public.orders", "event_count": len(ids)}],
    )
    marker_key = json.dumps({"payload": {"id": txn}}).encode()
    out = [(f"{prefix}.transaction", 0, marker_key, json.dumps(begin).encode())]
    for order, number in enumerate(ids, 1):
        payload = change["payload"]
        payload["after"] = {"id": number, "total": f"{number}.00"}
        payload["source"].update(txId=xid, lsn=lsn + order, sequence=f'[null,"{lsn + order}"]')
        payload["transaction"] = {"id": txn, "total_order": order, "data_collection_order": order}
        key = json.dumps({"payload": {"id": number}}).encode()
        out.append(
            (f"{prefix}.public.orders", number % partitions, key, json.dumps(change).encode())
        )
    out.append((f"{prefix}.transaction", 0, marker_key, json.dumps(end).encode()))
    return out
