"""Which committed transactions a chunk's snapshot saw: the watermark rule of a resumable snapshot.

An incremental snapshot reads a table in primary-key chunks, each in a transaction of its own,
while the slot keeps streaming (Netflix's DBLog, Flink CDC's incremental snapshot). A chunk's
rows show exactly the transactions its snapshot saw, and PostgreSQL says which those are:
``pg_current_snapshot()`` in the chunk's transaction gives ``xmin:xmax:xip``. A committed
transaction is visible to it unless its xid is ``>= xmax`` or listed in ``xip``. So instead of
DBLog's two watermark writes and their timing window, the rule is exact:

    The chunk's rows are placed in the stream at a position P after every transaction the
    snapshot saw (at or after its high watermark: the WAL insert position read with the
    snapshot). A row is emitted unless its key was changed by a transaction before P that the
    snapshot did *not* see; for such a key the stream itself carries the newer state.

P is a record boundary the slot has decoded up to: a peek decodes flushed WAL only, and a
commit is inserted before it is flushed (with ``synchronous_commit=off``, visible too), so the
connector places chunks no further than the flushed position it read before a complete peek.

Then, for every key, the transactions before P are reflected in the row (or the row is left
out), and those after P come after it: a consumer never sees a state older than one it has
already seen. Pure Python: the rule, the snapshot text and the xid arithmetic, no database.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from spark_ckpt.errors import StateFormatError

from ..chunks import window_dropped

__all__ = ["ChunkSnapshot", "dropped_keys"]

_XID_SPACE = 1 << 32


def _precedes(a: int, b: int) -> bool:
    """``a`` is older than ``b`` in PostgreSQL's circular 32-bit xid space."""
    return 0 < (b - a) % _XID_SPACE < _XID_SPACE // 2


@dataclass(frozen=True)
class ChunkSnapshot:
    """A chunk read's MVCC snapshot and high watermark.

    Attributes
    ----------
    xmin, xmax
        ``pg_current_snapshot()``'s bounds, as 32-bit xids (what the stream carries).
    xip
        Transactions in progress when the snapshot was taken (32-bit).
    high_watermark
        The WAL insert position read with the snapshot: every transaction the snapshot saw
        committed before it.
    """

    xmin: int
    xmax: int
    xip: frozenset[int]
    high_watermark: int

    @classmethod
    def parse(cls, text: str, high_watermark: int) -> ChunkSnapshot:
        """From ``pg_current_snapshot()::text`` (``xmin:xmax:xip,...``, 64-bit xids)."""
        try:
            low, high, listed = text.split(":")
            xip = frozenset(int(x) % _XID_SPACE for x in listed.split(",") if x)
            return cls(int(low) % _XID_SPACE, int(high) % _XID_SPACE, xip, high_watermark)
        except ValueError as e:
            raise StateFormatError(f"not a pg_current_snapshot() text: {text!r}") from e

    def saw(self, xid: int) -> bool:
        """True when a *committed* transaction ``xid`` is visible to the snapshot."""
        xid %= _XID_SPACE
        return xid not in self.xip and _precedes(xid, self.xmax)

    def to_json(self) -> dict[str, object]:
        """For the chunk's manifest."""
        return {
            "xmin": self.xmin,
            "xmax": self.xmax,
            "xip": sorted(self.xip),
            "highWatermark": self.high_watermark,
        }

    @classmethod
    def from_json(cls, value: dict[str, object]) -> ChunkSnapshot:
        """Parse :meth:`to_json`."""
        try:
            xip = value["xip"]
            assert isinstance(xip, list)
            return cls(
                int(str(value["xmin"])),
                int(str(value["xmax"])),
                frozenset(int(x) for x in xip),
                int(str(value["highWatermark"])),
            )
        except (KeyError, ValueError, AssertionError) as e:
            raise StateFormatError(f"not a chunk snapshot: {value!r}") from e


def dropped_keys(
    snapshot: ChunkSnapshot, changes: Iterable[tuple[int, str, str | None]]
) -> frozenset[str]:
    """The keys of a chunk's table whose rows must be left out (driver, per emitted chunk).

    Parameters
    ----------
    snapshot
        The chunk's snapshot.
    changes
        ``(xid, key text, old key text)`` of every change of the chunk's table in the stream
        from before the chunk was read up to the chunk's position P. The old key is the row's
        key before the change when the change moved it to another key (else None).

    Returns
    -------
    frozenset[str]
        Key texts (as the output's ``key`` column spells them) changed by a transaction the
        snapshot did not see.
    """
    return window_dropped((key, old) for xid, key, old in changes if not snapshot.saw(xid))
