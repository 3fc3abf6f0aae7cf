"""The incremental snapshot's connector-independent parts: key ranges, their state, the window.

An incremental snapshot (``snapshot=incremental``: postgres, mysql) reads each table as
consecutive primary-key ranges ``(after, upto]`` next to the change stream, each chunk on its
own short read with no lock held (Netflix's DBLog; Flink CDC's and Debezium's incremental
snapshots). What does not depend on the database lives here:

- :class:`ChunkBounds`: a chunk's key range, keys as the connector's text forms;
- :class:`PendingChunk` and :class:`IncrementalState`: where the snapshot is, in the offset, so a
  restart re-reads no finished chunk;
- :func:`window_dropped`: the window's reconciliation. A chunk is emitted once the stream has
  been read past its high watermark, placed after the stream's changes up to there; a key that a
  change in the chunk's window (from before its read to where it is placed) touched is left out
  of it, because the stream carries that key's newer state (full row images). What remains
  equals the table where the chunk is placed.

Pure; runs on the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "ALL_KEYS",
    "ChunkBounds",
    "IncrementalState",
    "Key",
    "PendingChunk",
    "window_dropped",
]

Key = tuple[str, ...]
"""A primary key as the text forms of its columns, in key order."""

ALL_KEYS = "*"
"""A dropped "key" meaning every row: the table was truncated by a change in the window."""


@dataclass(frozen=True)
class ChunkBounds:
    """One chunk: the keys in ``(after, upto]`` of a table.

    Attributes
    ----------
    table
        The table's qualified name.
    index
        The chunk's number within its table, from 0.
    after
        The exclusive lower bound (None: from the table's first key).
    upto
        The inclusive upper bound (None: to the table's last key, including keys inserted
        after the bound was found).
    """

    table: str
    index: int
    after: Key | None
    upto: Key | None

    def to_json(self) -> dict[str, Any]:
        """For offsets (stable keys)."""
        return {
            "table": self.table,
            "index": self.index,
            "after": None if self.after is None else list(self.after),
            "upto": None if self.upto is None else list(self.upto),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ChunkBounds:
        """Parse :meth:`to_json`."""
        after, upto = value["after"], value["upto"]
        return cls(
            str(value["table"]),
            int(value["index"]),
            None if after is None else tuple(str(v) for v in after),
            None if upto is None else tuple(str(v) for v in upto),
        )


@dataclass(frozen=True)
class PendingChunk:
    """A chunk planned for reading and not emitted yet.

    Attributes
    ----------
    bounds
        Its key range.
    since
        The stream position its batch started at, as the connector orders positions (an LSN; a
        binlog position's ordinal): its window of stream changes starts here at the latest.
    read_in
        The checkpoint (batch) whose partitions read it.
    rebuild
        For a table read again after a schema change (:attr:`IncrementalState.rebuild`): its
        place in the snapshot's sequence of tables; None for the snapshot's own tables.
    """

    bounds: ChunkBounds
    since: int
    read_in: int
    rebuild: int | None = None

    @property
    def name(self) -> str:
        """A file-name-safe identity: ``<table>-<index>`` (``<table>-r<place>-<index>``)."""
        if self.rebuild is None:
            return f"{self.bounds.table}-{self.bounds.index:06d}"
        return f"{self.bounds.table}-r{self.rebuild}-{self.bounds.index:06d}"

    @property
    def read(self) -> tuple[str, int | None]:
        """Which read of its table it belongs to: ``(table, rebuild)``."""
        return (self.bounds.table, self.rebuild)

    def to_json(self) -> dict[str, Any]:
        """For offsets."""
        value = {**self.bounds.to_json(), "since": self.since, "readIn": self.read_in}
        if self.rebuild is not None:
            value["rebuild"] = self.rebuild
        return value

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> PendingChunk:
        """Parse :meth:`to_json`."""
        rebuild = value.get("rebuild")
        return cls(
            ChunkBounds.from_json(value),
            int(value["since"]),
            int(value["readIn"]),
            None if rebuild is None else int(rebuild),
        )


@dataclass(frozen=True)
class IncrementalState:
    """Where an incremental snapshot is, in an offset.

    The tables are read in sequence: the captured tables (``snapshot=incremental``), then
    those read again because of a schema change a mirror cannot follow in place (``rebuild``).

    Attributes
    ----------
    table
        Index in that sequence of the table whose chunks are being planned (its length: all
        planned).
    after
        The last planned chunk's upper key in that table (None: none planned yet).
    index
        The next chunk's number in that table.
    pending
        Chunks read (or being read in the batch ending here) but not emitted.
    chunks_done, rows_done
        Emitted so far.
    rebuild
        Tables read again after the captured ones, in the order their schema changes came.
    """

    table: int = 0
    after: Key | None = None
    index: int = 0
    pending: tuple[PendingChunk, ...] = ()
    chunks_done: int = 0
    rows_done: int = 0
    rebuild: tuple[str, ...] = ()

    def planning_done(self, tables: int) -> bool:
        """True once every table's last chunk is planned (``tables``: the captured ones)."""
        return self.table >= tables + len(self.rebuild)

    def superseded(self, read: tuple[str, int | None], tables: int) -> bool:
        """Whether a later read of the same table is queued: this one's rows are not needed.

        A second schema change that needs a new read, during one, begins a new rebuild; the
        earlier read is neither planned further, nor emitted, nor ended.
        """
        table, place = read
        return place is not None and table in self.rebuild[place - tables + 1 :]

    def closes(self, read: tuple[str, int | None]) -> bool:
        """Whether a rebuild's ``read`` has every chunk planned and none pending (its end)."""
        place = read[1]
        return (
            place is not None
            and self.table > place
            and not any(c.read == read for c in self.pending)
        )

    def finished(self, tables: int) -> bool:
        """True once every chunk is emitted: the stream goes on alone."""
        return self.planning_done(tables) and not self.pending

    def floor(self) -> int | None:
        """The position the stream may be confirmed up to at most (None: no limit)."""
        return min((c.since for c in self.pending), default=None)

    def to_json(self) -> dict[str, Any]:
        """For offsets (stable key order)."""
        return {
            "table": self.table,
            "after": None if self.after is None else list(self.after),
            "index": self.index,
            "pending": [c.to_json() for c in self.pending],
            "chunksDone": self.chunks_done,
            "rowsDone": self.rows_done,
            **({"rebuild": list(self.rebuild)} if self.rebuild else {}),
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> IncrementalState:
        """Parse :meth:`to_json`."""
        after = value["after"]
        return cls(
            int(value["table"]),
            None if after is None else tuple(str(v) for v in after),
            int(value["index"]),
            tuple(PendingChunk.from_json(c) for c in value["pending"]),
            int(value["chunksDone"]),
            int(value["rowsDone"]),
            tuple(str(t) for t in value.get("rebuild", ())),
        )

    def with_pending(self, pending: tuple[PendingChunk, ...]) -> IncrementalState:
        """A copy with other pending chunks."""
        return replace(self, pending=pending)

    def after_emits(
        self,
        emitted: Sequence[PendingChunk],
        rows: int,
        rereads: Sequence[PendingChunk],
        since: int,
        checkpoint: int,
    ) -> IncrementalState:
        """The state once a batch emitted ``emitted`` (``rows`` rows in all), before its reads.

        ``rereads`` (chunks whose read must start over: its spill was lost, or the window
        cannot say what a racing transaction changed) stay pending, read again in batch
        ``checkpoint`` from the batch's start ``since``.
        """
        remaining = tuple(c for c in self.pending if c not in emitted and c not in rereads)
        restarted = tuple(replace(c, since=since, read_in=checkpoint) for c in rereads)
        return replace(
            self,
            pending=remaining + restarted,
            chunks_done=self.chunks_done + len(emitted),
            rows_done=self.rows_done + rows,
        )


def window_dropped(changes: Iterable[tuple[str, str | None]]) -> frozenset[str]:
    """The keys to leave out of a chunk: every key its window's changes touched (driver).

    Parameters
    ----------
    changes
        ``(key text, old key text)`` of each change of the chunk's table in its window that
        the chunk's read may not have seen (all of them where the database cannot tell which
        it saw). The old key is the row's key before the change when the change moved it to
        another key (else None); :data:`ALL_KEYS` for a truncation.

    Returns
    -------
    frozenset[str]
        Key texts as the output's ``key`` column spells them; both keys of a key change (the
        old key's row is gone, the new one's comes from the stream).
    """
    dropped: set[str] = set()
    for key, old_key in changes:
        dropped.add(key)
        if old_key is not None:
            dropped.add(old_key)
    return frozenset(dropped)
