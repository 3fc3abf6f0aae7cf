"""A small shop database changed by multi-table transactions: for mirror tests and the demo.

:class:`ShopWorkload` keeps ``orders`` (``id``, ``customer``, ``total``, ``note``) and ``items``
(``id``, ``order_id``, ``amount``, ``sku``) and changes them only in transactions that keep one
invariant: every order's ``total`` is the sum of its items' ``amount`` (decimals with two digits,
kept as exact text). A reader that sees one table after a transaction and the other before it
breaks the invariant, which is what the mirror's consistent reads exist to prevent.

Transactions insert orders with items, add, change and delete items, move an item to a new id
(a primary-key change), and delete whole orders. :meth:`ShopWorkload.debezium_records` renders
them as a Debezium change log (``BEGIN``, the change events, ``END``); :attr:`ShopWorkload.rows`
is the state the mirrors must end in. Pure Python, seeded, no I/O.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

__all__ = ["ITEMS", "ORDERS", "ShopChange", "ShopWorkload", "invariant_violations"]

ORDERS = "public.orders"
ITEMS = "public.items"


@dataclass(frozen=True)
class ShopChange:
    """One row change of a transaction (``op`` in ``c``, ``u``, ``d``)."""

    table: str
    op: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @property
    def key(self) -> dict[str, Any]:
        """The primary key (of the new row; of the old one for a delete)."""
        image = self.after if self.after is not None else self.before
        assert image is not None
        return {"id": image["id"]}


def _money(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.01")))


@dataclass
class ShopWorkload:
    """Random shop transactions and the state they leave.

    Parameters
    ----------
    seed
        Seeds the randomness, so a run can be repeated.
    """

    seed: int = 0
    rows: dict[str, dict[int, dict[str, Any]]] = field(
        default_factory=lambda: {ORDERS: {}, ITEMS: {}}
    )
    transactions: list[list[ShopChange]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._next_id = {ORDERS: 1, ITEMS: 1}

    def _new_id(self, table: str) -> int:
        value = self._next_id[table]
        self._next_id[table] += 1
        return value

    def _amount(self) -> Decimal:
        return Decimal(self._rng.randint(1, 99999)) / 100

    def _new_item(self, order_id: int) -> dict[str, Any]:
        return {
            "id": self._new_id(ITEMS),
            "order_id": order_id,
            "amount": _money(self._amount()),
            "sku": f"sku-{self._rng.randint(1, 500)}",
        }

    def _items_of(self, order_id: int) -> list[dict[str, Any]]:
        return [i for i in self.rows[ITEMS].values() if i["order_id"] == order_id]

    def _set_total(self, order_id: int, changes: list[ShopChange]) -> None:
        order = self.rows[ORDERS][order_id]
        total = sum((Decimal(i["amount"]) for i in self._items_of(order_id)), Decimal(0))
        updated = {**order, "total": _money(total)}
        changes.append(ShopChange(ORDERS, "u", dict(order), updated))
        self.rows[ORDERS][order_id] = updated

    def _put(self, table: str, row: dict[str, Any], changes: list[ShopChange]) -> None:
        self.rows[table][row["id"]] = row
        changes.append(ShopChange(table, "c", None, dict(row)))

    def _delete(self, table: str, row_id: int, changes: list[ShopChange]) -> None:
        row = self.rows[table].pop(row_id)
        changes.append(ShopChange(table, "d", row, None))

    def step(self) -> list[ShopChange]:
        """Run one random transaction; return its changes in order."""
        rng = self._rng
        changes: list[ShopChange] = []
        orders = sorted(self.rows[ORDERS])
        items = sorted(self.rows[ITEMS])
        kind = rng.random()
        if not orders or kind < 0.3:
            order_id = self._new_id(ORDERS)
            # The order first (its total updated last), as an application would write it.
            self._put(
                ORDERS,
                {
                    "id": order_id,
                    "customer": f"c{rng.randint(1, 50)}",
                    "total": "0.00",
                    "note": rng.choice([None, "gift", "express", "n" * rng.randint(1, 40)]),
                },
                changes,
            )
            for _ in range(rng.randint(1, 4)):
                self._put(ITEMS, self._new_item(order_id), changes)
            self._set_total(order_id, changes)
        elif kind < 0.45 or not items:
            order_id = rng.choice(orders)
            self._put(ITEMS, self._new_item(order_id), changes)
            self._set_total(order_id, changes)
        elif kind < 0.7:
            item = self.rows[ITEMS][rng.choice(items)]
            updated = {**item, "amount": _money(self._amount())}
            changes.append(ShopChange(ITEMS, "u", dict(item), updated))
            self.rows[ITEMS][item["id"]] = updated
            self._set_total(item["order_id"], changes)
        elif kind < 0.8:
            item = self.rows[ITEMS][rng.choice(items)]
            self._delete(ITEMS, item["id"], changes)
            self._set_total(item["order_id"], changes)
        elif kind < 0.9:
            # A primary-key change: the item moves to a new id, its amount unchanged.
            item = self.rows[ITEMS].pop(rng.choice(items))
            moved = {**item, "id": self._new_id(ITEMS)}
            self.rows[ITEMS][moved["id"]] = moved
            changes.append(ShopChange(ITEMS, "u", dict(item), dict(moved)))
        else:
            order_id = rng.choice(orders)
            for item in self._items_of(order_id):
                self._delete(ITEMS, item["id"], changes)
            self._delete(ORDERS, order_id, changes)
        self.transactions.append(changes)
        return changes

    def debezium_records(
        self, changes: list[ShopChange], txn_id: str, ts_ms: int
    ) -> list[dict[str, Any]]:
        """One transaction as Debezium records: ``BEGIN``, change events, ``END``.

        Debezium carries a primary-key update as a delete of the old key and a create of the
        new one, in the same transaction; so does this.
        """
        events: list[dict[str, Any]] = []
        for change in changes:
            if (
                change.op == "u"
                and change.before
                and change.after
                and (change.before["id"] != change.after["id"])
            ):
                parts = [
                    ShopChange(change.table, "d", change.before, None),
                    ShopChange(change.table, "c", None, change.after),
                ]
            else:
                parts = [change]
            for part in parts:
                schema, table = part.table.split(".")
                events.append(
                    {
                        "op": part.op,
                        "before": part.before,
                        "after": part.after,
                        "key": part.key,
                        "source": {
                            "name": "shop",
                            "schema": schema,
                            "table": table,
                            "ts_ms": ts_ms,
                        },
                        "ts_ms": ts_ms + 1,
                    }
                )
        for index, event in enumerate(events):
            event["transaction"] = {
                "id": txn_id,
                "total_order": index + 1,
                "data_collection_order": index + 1,
            }
        counts: dict[str, int] = {}
        for event in events:
            name = f"{event['source']['schema']}.{event['source']['table']}"
            counts[name] = counts.get(name, 0) + 1
        return [
            {"status": "BEGIN", "id": txn_id, "ts_ms": ts_ms},
            *events,
            {
                "status": "END",
                "id": txn_id,
                "event_count": len(events),
                "data_collections": [
                    {"data_collection": n, "event_count": c} for n, c in sorted(counts.items())
                ],
                "ts_ms": ts_ms,
            },
        ]


def invariant_violations(orders: list[dict[str, Any]], items: list[dict[str, Any]]) -> list[str]:
    """Orders whose ``total`` is not the sum of their items' ``amount`` (and orphaned items)."""
    sums: dict[Any, Decimal] = {}
    for item in items:
        sums[item["order_id"]] = sums.get(item["order_id"], Decimal(0)) + Decimal(
            str(item["amount"])
        )
    problems = []
    known = set()
    for order in orders:
        known.add(order["id"])
        expected = sums.get(order["id"], Decimal(0))
        if Decimal(str(order["total"])) != expected:
            problems.append(f"order {order['id']}: total {order['total']} != items {expected}")
    problems += [f"items of missing order {o}" for o in sums if o not in known]
    return problems
