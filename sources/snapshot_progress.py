"""How far a snapshot has got: tables, rows, and the words and JSON it is reported in.

Pure Python. A connector's snapshot (postgres, mysql) updates one :class:`SnapshotProgress` as
it reads; the connector reports it in every progress event (``status.snapshot``) and in its soft
declines, so the history and ``spark-ckpt status`` show it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SnapshotProgress"]


@dataclass(frozen=True)
class SnapshotProgress:
    """A snapshot's progress at one moment.

    Attributes
    ----------
    tables
        Captured tables.
    tables_done
        Tables read completely.
    rows_read
        Rows read so far, over all tables.
    rows_estimated
        The server's estimate of all the tables' rows (PostgreSQL's ``pg_class.reltuples``,
        MySQL's ``information_schema.TABLES.TABLE_ROWS``); None when the server has none.
    current_table
        The table being read, if any.
    chunks_done, chunks_pending
        ``snapshot=incremental``: chunks emitted, and chunks read or being read but not
        emitted yet (None for the one-unit snapshot).
    """

    tables: int
    tables_done: int
    rows_read: int
    rows_estimated: int | None
    current_table: str | None
    chunks_done: int | None = None
    chunks_pending: int | None = None

    @property
    def summary(self) -> str:
        """One line for people.

        For example ``table 2 of 3 (public.items), 1,204,000 of about 3,000,000 rows (40%)``.
        """
        if self.tables_done == self.tables:
            where = f"{self.tables} table(s) done"
        else:
            where = f"table {self.tables_done + 1} of {self.tables}"
            if self.current_table:
                where += f" ({self.current_table})"
        rows = f"{self.rows_read:,}"
        if self.rows_estimated:
            share = min(100, round(100 * self.rows_read / self.rows_estimated))
            rows += f" of about {self.rows_estimated:,} rows ({share}%)"
        else:
            rows += " rows"
        if self.chunks_done is not None:
            rows += f"; {self.chunks_done} chunk(s) done, {self.chunks_pending or 0} in flight"
        return f"{where}, {rows}"

    def to_json(self) -> dict[str, Any]:
        """camelCase, as in Spark's progress events."""
        return {
            "tables": self.tables,
            "tablesDone": self.tables_done,
            "rowsRead": self.rows_read,
            "rowsEstimated": self.rows_estimated,
            "currentTable": self.current_table,
            "chunksDone": self.chunks_done,
            "chunksPending": self.chunks_pending,
            "summary": self.summary,
        }
