"""A mysql driver SIGKILLed during ``snapshot=incremental`` while a workload writes: it resumes.

Two tables, ``accounts`` (``id`` key) and ``order_lines`` (a composite ``(order_id, line)``
key), hold rows before the query starts. :class:`Workload` commits transactions on them from a
thread: each inserts a row and updates, deletes and re-keys existing rows anywhere in the key
ranges, so inside and outside the chunks being read. :func:`run_scenario` runs a bounded driver
(``Trigger.availableNow`` into ``delta-2pc``) SIGKILLed while an executor reads chunk ``kill_at``
of ``accounts`` (the fault point ``during_chunk_read``), then a clean driver to the end, and
returns what it found: the chunks emitted before the kill, each chunk's planned reads (a
restart that resumed at the last completed chunk plans every chunk once: the killed batch is
run again as logged), and what is wrong with the change log (:func:`problems`). The workload
starts once the first driver planned its first batch and ends before the clean driver starts
(a bounded run stops at the binlog's end as it finds it). Run as a
module (``python -m harness.faults.mysql_incremental drive HOST PORT USER DATABASE TABLE
CHECKPOINT CHUNK_ROWS``, the password in ``SPARK_CKPT_TEST_MYSQL_PASSWORD``) it is the driver.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.faults import crash

if TYPE_CHECKING:
    from harness.servers.mariadb import MariaDbServer

PASSWORD_VARIABLE = "SPARK_CKPT_TEST_MYSQL_PASSWORD"
KEYS = {"accounts": ("id",), "order_lines": ("order_id", "line")}
ACCOUNTS, ORDERS = 300, 50
"""Rows before the start: accounts 1..300, lines of orders 1..50 (four each, ``a`` to ``d``)."""


def create_tables(server: MariaDbServer, database: str) -> None:
    """The two tables, filled."""
    server.execute(
        "CREATE TABLE accounts (id int PRIMARY KEY, name varchar(20), balance decimal(10,2))",
        database,
    )
    server.execute(
        "CREATE TABLE order_lines (order_id int, line varchar(8), qty int, "
        "PRIMARY KEY (order_id, line))",
        database,
    )
    accounts = ", ".join(f"({i}, 'n{i}', {i}.25)" for i in range(1, ACCOUNTS + 1))
    server.execute(f"INSERT INTO accounts VALUES {accounts}", database)
    order_lines = ", ".join(f"({o}, '{c}', {o})" for o in range(1, ORDERS + 1) for c in "abcd")
    server.execute(f"INSERT INTO order_lines VALUES {order_lines}", database)


class Workload(threading.Thread):
    """Transactions on both tables until stopped (or ``limit`` of them), each one captured.

    Each updates account 1 (never deleted or moved) and random rows of both tables: an update,
    then a delete or a key update or neither; one in ten inserts a row in each.

    ``pause`` seconds between transactions keep the tables (whose new keys fall in the last,
    open-ended chunk of each) from outgrowing a small test.
    """

    def __init__(
        self, server: MariaDbServer, database: str, seed: int, limit: int, pause: float
    ) -> None:
        super().__init__(daemon=True)
        self.server, self.database, self.rng = server, database, random.Random(seed)
        self.limit, self.pause = limit, pause
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.transactions = 0

    def run(self) -> None:
        """Write until :attr:`stop_event` is set."""
        rng = self.rng
        try:
            with self.server.connect(self.database) as conn, conn.cursor() as cursor:
                while not self.stop_event.is_set() and self.transactions < self.limit:
                    n = self.transactions
                    conn.begin()
                    # Always one captured change (the transaction is delivered), on a row that
                    # stays: the counter in account 1.
                    cursor.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1")
                    if rng.random() < 0.1:  # a few new rows: the tables grow a little
                        cursor.execute(
                            "INSERT INTO accounts (id, name, balance) VALUES (%s, 'new', 0)",
                            (10**6 + n,),
                        )
                        cursor.execute("INSERT INTO order_lines VALUES (%s, 'z', 1)", (1000 + n,))
                    account = rng.randint(2, ACCOUNTS)
                    cursor.execute(
                        "UPDATE accounts SET balance = balance + 1, name = %s WHERE id = %s",
                        (f"u{n}", account),
                    )
                    kind = rng.random()
                    if kind < 0.15:
                        cursor.execute(
                            "DELETE FROM accounts WHERE id = %s", (rng.randint(2, ACCOUNTS),)
                        )
                    elif kind < 0.3:  # a key update, to another chunk
                        cursor.execute(
                            "UPDATE accounts SET id = id + 10000 WHERE id = %s",
                            (rng.randint(2, ACCOUNTS),),
                        )
                    order = rng.randint(1, ORDERS)
                    cursor.execute(
                        "UPDATE order_lines SET qty = qty + 1 WHERE order_id = %s", (order,)
                    )
                    kind = rng.random()
                    if kind < 0.15:
                        cursor.execute(
                            "DELETE FROM order_lines WHERE order_id = %s AND line = %s",
                            (rng.randint(1, ORDERS), rng.choice("abcd")),
                        )
                    elif kind < 0.3:  # the second key column changes
                        cursor.execute(
                            "UPDATE order_lines SET line = CONCAT(line, 'x') "
                            "WHERE order_id = %s AND line = %s",
                            (rng.randint(1, ORDERS), rng.choice("abcd")),
                        )
                    conn.commit()
                    self.transactions += 1
                    time.sleep(self.pause)
        except BaseException as e:  # reported by whoever started it
            self.error = e


def source_rows(server: MariaDbServer, database: str, table: str) -> dict[str, dict[str, Any]]:
    """A table's rows by key text, values as the connector writes them."""
    with server.connect(database) as conn, conn.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table}")
        columns = [d[0] for d in cursor.description or ()]
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    out = {}
    for row in rows:
        values = {c: str(v) if isinstance(v, Decimal) else v for c, v in row.items()}
        out[_key(table, values)] = values
    return out


def _key(table: str, image: dict[str, Any]) -> str:
    return json.dumps([image[k] for k in KEYS[table]])


def fold(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """The change log replayed by key in commit order (a key update moves the row).

    A schema change that adds a column gives the rows stored so far its ``default`` (what the
    table's existing rows read for it), as a mirror does.
    """
    state: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in KEYS}
    for row in sorted(rows, key=lambda r: (r["txn_order"], r["event_index"])):
        name = row["table"].split(".")[1]
        if row["op"] == "s":
            known = {c["name"] for c in json.loads(row["before"] or '{"columns": []}')["columns"]}
            for column in json.loads(row["after"])["columns"]:
                if column["name"] not in known and "default" in column:
                    for image in state[name].values():
                        image.setdefault(column["name"], column["default"])
            continue
        if row["before"] is not None:
            state[name].pop(_key(name, json.loads(row["before"])), None)
        if row["op"] == "d":
            state[name].pop(_key(name, json.loads(row["key"])), None)
        elif row["after"] is not None:
            after = json.loads(row["after"])
            state[name][_key(name, after)] = after
    return state


def problems(table: Path, server: MariaDbServer, database: str, committed: int) -> list[str]:
    """What is wrong with the change log (empty: nothing).

    Every transaction (``committed`` of the workload's, and each chunk) whole in exactly one
    Delta version, ``txn_order`` 0..n-1 in version order, and the log folded by key equal to the
    tables.
    """
    from harness.faults.debezium import delta_changes

    rows = delta_changes(table)
    wrong = []
    by_txn: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_txn.setdefault(row["txn_id"], []).append(row)
    for txn_id, txn_rows in by_txn.items():
        if len({r["version"] for r in txn_rows}) != 1:
            wrong.append(f"transaction {txn_id} is split over versions")
        if sorted(r["event_index"] for r in txn_rows) != list(range(txn_rows[0]["txn_size"])):
            wrong.append(f"transaction {txn_id} is not whole once")
    streamed = [t for t in by_txn if not t.startswith("snapshot:")]
    if len(streamed) != committed:
        wrong.append(f"{len(streamed)} transactions landed, {committed} were committed")
    for name in KEYS:
        if not any(r["op"] == "r" and r["table"].endswith(f".{name}") for r in rows):
            wrong.append(f"no snapshot row of {name}")
    orders = sorted({(r["txn_order"], r["version"]) for r in rows})
    if [o for o, _ in orders] != list(range(len(by_txn))):
        wrong.append("txn_order is not 0..n-1, one per transaction")
    if [v for _, v in orders] != sorted(v for _, v in orders):
        wrong.append("a later transaction is in an earlier Delta version")
    folded = fold(rows)
    for name in KEYS:
        source = source_rows(server, database, name)
        if folded[name] != source:
            keys = sorted(
                k for k in {*folded[name], *source} if folded[name].get(k) != source.get(k)
            )
            wrong.append(f"{name} folds to another table at keys {keys[:5]} ({len(keys)} in all)")
    return wrong


def drive(
    host: str, port: str, user: str, database: str, table: str, checkpoint: str, chunk_rows: str
) -> None:
    """One driver: an availableNow query to the end, unless a fault kills it first."""
    import spark_ckpt

    spark = spark_ckpt.local_session("mysql-incremental-crash")
    control = spark_ckpt.install(spark)
    query = (
        spark.readStream.format("txn-cdc")
        .option("connector", "mysql")
        .option("host", host)
        .option("port", port)
        .option("user", user)
        .option("password", os.environ[PASSWORD_VARIABLE])
        .option("serverId", "7301")
        .option("tables", ",".join(f"{database}.{name}" for name in KEYS))
        .option("snapshot", "incremental")
        .option("snapshotChunkRows", chunk_rows)
        .option("snapshotParallelism", "2")
        .option("snapshotDir", f"{checkpoint}-spill")
        .load()
        .writeStream.format("delta-2pc")
        .option("path", table)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    if not control.await_termination(query, 600):
        raise SystemExit("the availableNow run did not finish within 10 minutes")
    spark.stop()


def logged_offsets(checkpoint: Path) -> list[dict[str, Any]]:
    """Each logged batch's end offset, by batch id."""
    found = []
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            found.append({"batch": int(path.name), **json.loads(path.read_text().splitlines()[-1])})
    return sorted(found, key=lambda o: o["batch"])


def run_scenario(
    server: MariaDbServer, database: str, workdir: Path, chunk_rows: int = 50, kill_at: int = 4
) -> dict[str, Any]:
    """Kill a driver at chunk ``kill_at`` of ``accounts``, finish with another; the numbers."""
    table, checkpoint = workdir / "table", workdir / "ckpt"
    create_tables(server, database)
    args = ["-m", "harness.faults.mysql_incremental", "drive", server.host, str(server.port)]
    args += [server.user, database, str(table), str(checkpoint), str(chunk_rows)]
    env = {PASSWORD_VARIABLE: server.password}
    fault = f"during_chunk_read:{kill_at}"
    # The workload starts once the killed driver planned its first batch (so after the query's
    # initial offset: every transaction is in the stream) and writes beside its chunk reads.
    workload = Workload(server, database, seed=5, limit=150, pause=0.05)
    process = crash.start_driver(args, fault, **env)
    try:
        deadline = time.monotonic() + 300
        while not (checkpoint / "offsets" / "0").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the first driver planned no batch within 5 minutes")
            time.sleep(0.1)
        workload.start()
        status = crash.finish_driver(process, fault)
        if status != -signal.SIGKILL:
            raise RuntimeError(f"the driver was not killed at chunk {kill_at} (status {status})")
        logged = logged_offsets(checkpoint)
        committed = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
        last = next(o for o in logged if o["batch"] == max(committed))
        done_at_kill = last["snapshot"]["chunksDone"]
    finally:
        if process.poll() is None:
            process.kill()
        # The clean run below goes to the binlog's end as it finds it: the workload ends first.
        workload.join(300)
    if workload.is_alive() or workload.error is not None:
        raise RuntimeError(f"the workload failed or did not finish: {workload.error}")
    if crash.run_killable(args, None, **env) != 0:
        raise RuntimeError("the clean run failed")
    reads: dict[tuple[str, int], set[int]] = {}
    for offset in logged_offsets(checkpoint):
        for chunk in (offset.get("snapshot") or {}).get("pending", []):
            if chunk["readIn"] == offset["checkpoint"]:
                reads.setdefault((chunk["table"], chunk["index"]), set()).add(chunk["readIn"])
    indexes: dict[str, list[int]] = {}
    for name, index in sorted(reads):
        indexes.setdefault(name, []).append(index)
    return {
        "chunks_done_at_kill": done_at_kill,
        "chunks": {name.split(".")[1]: found for name, found in indexes.items()},
        "chunks_read_twice": sorted(k for k, v in reads.items() if len(v) > 1),
        "workload_transactions": workload.transactions,
        "problems": problems(table, server, database, workload.transactions),
    }


if __name__ == "__main__":
    if len(sys.argv) == 9 and sys.argv[1] == "drive":
        drive(*sys.argv[2:])
    else:
        raise SystemExit(
            "usage: python -m harness.faults.mysql_incremental drive HOST PORT USER DATABASE "
            "TABLE CHECKPOINT CHUNK_ROWS"
        )
