"""GTID states: what a server has committed, advanced one transaction at a time.

MariaDB's state is a list of ``domain-server-seq``, one per replication domain: the last
transaction of each domain (``@@gtid_binlog_pos``; MariaDB's "Global Transaction ID"
documentation). MySQL's is a set of ``uuid:interval[:interval...]`` (``Executed_Gtid_Set``;
MySQL's "GTID Sets"). Each transaction's own GTID (``0-1-42``, ``uuid:42``) advances the state;
the state after a transaction is where a replica of the same history continues after it
(MariaDB's ``@slave_connect_state``, MySQL's ``COM_BINLOG_DUMP_GTID``). Pure; runs on the driver.
"""

from __future__ import annotations

__all__ = ["advance", "is_mariadb_state", "reached"]

_ANONYMOUS = "00000000-0000-0000-0000-000000000000"
"""MySQL's source id of an ``ANONYMOUS_GTID`` event (``gtid_mode=OFF``): no GTID at all."""


def is_mariadb_state(state: str) -> bool:
    """Whether ``state`` is MariaDB's ``domain-server-seq`` list (else MySQL's set)."""
    return ":" not in state


def advance(state: str | None, gtid: str) -> str | None:
    """The state after the transaction ``gtid`` (per transaction, on the driver).

    An anonymous MySQL GTID leaves the state as it was.
    """
    if ":" not in gtid:
        return _advance_mariadb(state, gtid)
    source, _, number = gtid.rpartition(":")
    if source == _ANONYMOUS or not number.isdigit() or int(number) == 0:
        return state
    return _advance_mysql(state, source.lower(), int(number))


def _mariadb(state: str | None) -> dict[int, tuple[int, int]]:
    """``domain -> (server, seq)`` of a MariaDB state."""
    found: dict[int, tuple[int, int]] = {}
    for item in (state or "").split(","):
        if item.strip():
            domain, server, seq = (int(part) for part in item.strip().split("-"))
            found[domain] = (server, seq)
    return found


def _advance_mariadb(state: str | None, gtid: str) -> str:
    domains = _mariadb(state)
    domain, server, seq = (int(part) for part in gtid.split("-"))
    domains[domain] = (server, seq)
    return ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(domains.items()))


def _mysql(state: str | None) -> dict[str, list[tuple[int, int]]]:
    """``uuid -> [(first, last), ...]`` of a MySQL set, intervals inclusive."""
    found: dict[str, list[tuple[int, int]]] = {}
    for item in (state or "").replace("\n", "").split(","):
        if not item.strip():
            continue
        source, *intervals = item.strip().split(":")
        spans = found.setdefault(source.lower(), [])
        for interval in intervals:
            first, _, last = interval.partition("-")
            spans.append((int(first), int(last or first)))
    return found


def _advance_mysql(state: str | None, source: str, number: int) -> str:
    sets = _mysql(state)
    merged: list[tuple[int, int]] = []
    for first, last in sorted([*sets.get(source, []), (number, number)]):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    sets[source] = merged
    return ",".join(
        source + "".join(f":{a}" if a == b else f":{a}-{b}" for a, b in spans)
        for source, spans in sorted(sets.items())
    )


def reached(state: str | None, target: str) -> bool:
    """Whether ``state`` holds every transaction of ``target`` (driver, per transaction read).

    MariaDB: each of ``target``'s domains is at its sequence number or past it (within a domain
    sequence numbers only grow under ``gtid_strict_mode``). MySQL: ``target`` is a subset.
    """
    if is_mariadb_state(target):
        have = _mariadb(state)
        return all(
            domain in have and have[domain][1] >= seq
            for domain, (_, seq) in _mariadb(target).items()
        )
    have_sets = _mysql(state)
    for source, spans in _mysql(target).items():
        held = have_sets.get(source, [])
        for first, last in spans:
            if not any(a <= first and last <= b for a, b in held):
                return False
    return True
