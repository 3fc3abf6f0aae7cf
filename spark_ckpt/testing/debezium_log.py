"""Write Debezium-format transactional change logs: for the demo, tests and benchmarks.

:func:`random_log` plays a random workload the way a Debezium pipeline merged from several topics
delivers it: transactions of varied sizes interleave, a transaction's END may arrive before some of
its change events, some changes are outside any transaction, and the stream is split into files at
arbitrary points (so transactions span files). It returns the transactions in the order their END
was written: the order ``txn-cdc`` must emit them in.
"""

from __future__ import annotations

import itertools
import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GeneratedTxn", "random_log", "write_log"]

_TABLES = ("public.orders", "public.items", "public.customers")


@dataclass
class GeneratedTxn:
    """A transaction the generator wrote, with its change events in transaction order."""

    txn_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    transactional: bool = True


def _change(txn: GeneratedTxn, index: int, total: int, table: str, ts_ms: int) -> dict[str, Any]:
    schema, name = table.split(".")
    row_id = index + 1
    event: dict[str, Any] = {
        "op": "c" if index % 3 else "u",
        "before": None if index % 3 else {"id": row_id, "qty": index},
        "after": {"id": row_id, "qty": index + 1, "note": f"{txn.txn_id}/{index}"},
        "source": {"name": "demo", "schema": schema, "table": name, "ts_ms": ts_ms},
        "ts_ms": ts_ms + 5,
        "key": {"id": row_id},
    }
    if txn.transactional:
        event["transaction"] = {
            "id": txn.txn_id,
            "total_order": index + 1,
            "data_collection_order": index + 1,
        }
    return event


def random_log(
    rng: random.Random,
    transactions: int,
    *,
    max_size: int = 20,
    interleave: int = 4,
    non_transactional: float = 0.05,
    end_before_events: float = 0.2,
    id_prefix: str = "tx",
    first_ts_ms: int = 1_700_000_000_000,
) -> tuple[list[dict[str, Any]], list[GeneratedTxn]]:
    """Generate an interleaved log of ``transactions`` transactions.

    Parameters
    ----------
    rng
        Source of randomness (seed it for reproducible logs).
    transactions
        How many transactions (including single non-transactional changes).
    max_size
        Largest transaction, in change events (sizes are drawn from 1..max_size).
    interleave
        How many transactions may be open at once.
    non_transactional
        Fraction of changes written outside any transaction.
    end_before_events
        Probability that a transaction's END is written before all its events.
    id_prefix
        Prefix of generated transaction ids.
    first_ts_ms
        Commit time of the first transaction.

    Returns
    -------
    tuple
        ``(records, expected)``: the records in log order, and the transactions in END order.
    """
    records: list[dict[str, Any]] = []
    expected: list[GeneratedTxn] = []
    # Each active transaction: (txn, events still to write, END written?)
    active: list[tuple[GeneratedTxn, list[dict[str, Any]], bool]] = []
    started = 0
    ts = first_ts_ms
    while started < transactions or active:
        can_start = started < transactions and len(active) < interleave
        if can_start and (not active or rng.random() < 0.4):
            started += 1
            ts += rng.randint(1, 50)
            if rng.random() < non_transactional:
                txn = GeneratedTxn(f"nontx-{started}", transactional=False)
                event = _change(txn, 0, 1, rng.choice(_TABLES), ts)
                txn.events.append(event)
                records.append(event)
                expected.append(txn)
                continue
            txn = GeneratedTxn(f"{id_prefix}-{started}")
            size = rng.randint(1, max_size)
            events = [_change(txn, i, size, rng.choice(_TABLES), ts) for i in range(size)]
            txn.events = list(events)
            records.append({"status": "BEGIN", "id": txn.txn_id, "ts_ms": ts})
            active.append((txn, events, False))
            continue
        slot = rng.randrange(len(active))
        txn, pending, ended = active[slot]
        if not ended and (not pending or rng.random() < end_before_events / max(1, len(pending))):
            counts: dict[str, int] = {}
            for event in txn.events:
                source = event["source"]
                name = f"{source['schema']}.{source['table']}"
                counts[name] = counts.get(name, 0) + 1
            records.append(
                {
                    "status": "END",
                    "id": txn.txn_id,
                    "event_count": len(txn.events),
                    "data_collections": [
                        {"data_collection": name, "event_count": n}
                        for name, n in sorted(counts.items())
                    ],
                    "ts_ms": txn.events[0]["source"]["ts_ms"],
                }
            )
            expected.append(txn)
            ended = True
        elif pending:
            records.append(pending.pop(0))
        if ended and not pending:
            active.pop(slot)
        else:
            active[slot] = (txn, pending, ended)
    return records, expected


def write_log(
    directory: str,
    records: Sequence[dict[str, Any]],
    splits: Sequence[int],
    *,
    first_file: int = 0,
    trailing_newline: bool = True,
) -> list[str]:
    """Write ``records`` as ``*.jsonl`` files split before the given record indexes.

    Parameters
    ----------
    directory
        Where to write (created if missing).
    records
        The records in log order.
    splits
        Record indexes at which a new file starts (sorted, deduplicated internally).
    first_file
        Number of the first file (``00000007.jsonl`` for 7), to append files to a live log.
    trailing_newline
        End each file's last line with a newline.

    Returns
    -------
    list[str]
        The paths written.
    """
    os.makedirs(directory, exist_ok=True)
    bounds = [0, *sorted({s for s in splits if 0 < s < len(records)}), len(records)]
    paths = []
    for number, (lo, hi) in enumerate(itertools.pairwise(bounds), start=first_file):
        path = os.path.join(directory, f"{number:08d}.jsonl")
        lines = [json.dumps(r, separators=(",", ":")) for r in records[lo:hi]]
        text = "\n".join(lines) + ("\n" if trailing_newline and lines else "")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        paths.append(path)
    return paths
