"""What a ``txn-cdc`` connector provides to the reader framework.

A connector knows its external system; the framework (:mod:`.reader`) knows Spark and the gate.
Between them: JSON offsets (in the envelope of :mod:`.offsets`), a *plan* (the complete units
available after a start offset), the connector's FLIP-170 answer for a proposed cut, and a
:class:`PlannedBatch`: the end offset with the picklable partition values that executors turn
into Arrow record batches. The framework keeps the last planned batch for Spark's
``partitions`` call and asks the connector to :meth:`~ChangeConnector.replan` a batch only after
a restart. Nothing here imports Spark.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_ckpt.model.availability import SnapshotAvailability

from .gate import Cut

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ChangeConnector", "Plan", "PlannedBatch"]


@dataclass(frozen=True)
class PlannedBatch:
    """A batch as planned at a cut: where it ends and how executors read it.

    Attributes
    ----------
    end
        The end offset (JSON, in the :mod:`.offsets` envelope).
    partitions
        Picklable partition values covering ``(start, end]``, whole units each.
    newest_commit_ms
        The commit time of the newest source transaction the batch delivers (epoch
        milliseconds), when the connector knows it: the reader reports it
        (``newestCommitMs``), and the exported freshness is measured from it.
    """

    end: dict[str, Any]
    partitions: list[object]
    newest_commit_ms: int | None = None


@dataclass(frozen=True)
class Plan:
    """What is available after a start offset.

    Attributes
    ----------
    unit_sizes
        Sizes of the complete units (transactions, snapshot chunks) after the start offset, in
        stream order; the first may be the remainder of a unit already partly delivered.
    held_back
        When changes have been read that belong to no complete unit yet: why (a soft refusal
        such as "transaction T waits for its END"). None when nothing is held back.
    held_changes
        How many change events are held back.
    idle
        With no unit available: a batch that delivers no rows but moves the source's position
        past what it read and found nothing in (a heartbeat: committing it lets the external
        system release what it keeps for the query, a PostgreSQL slot's WAL), or runs work
        whose rows a later batch delivers (partitions that read snapshot chunks).
    held_units
        How many open units (transactions; a snapshot in progress is one) hold the
        ``held_changes``.
    oldest_held
        The oldest open unit in words, for people and for telling when it changes: the same text
        on every plan while that unit is the oldest, for example ``"transaction '730' (first
        record 0000000002.jsonl:1)"``. None when nothing is held back or it cannot be named.

    The reader reports the last three on every trigger, whether or not a batch is cut (progress
    events' ``heldBack``), and declines hard once they have shown no progress for
    ``softDeclineTimeout`` (:mod:`spark_ckpt.model.held_back`).
    """

    unit_sizes: list[int]
    held_back: SnapshotAvailability | None
    held_changes: int
    idle: PlannedBatch | None = None
    held_units: int = 0
    oldest_held: str | None = None


class ChangeConnector(abc.ABC):
    """One external change source behind ``txn-cdc``.

    The driver-side methods run in the query's long-lived reader process, once per trigger; the
    instance may cache planning state between calls. :meth:`read` runs on executors from a
    separately pickled copy: it must rely only on its partition value.
    """

    name: str
    """The connector's option value (``connector=...``)."""

    @abc.abstractmethod
    def initial_offset(self) -> dict[str, Any]:
        """Offset a new query starts from (driver, once per new query)."""

    @abc.abstractmethod
    def plan(self, start: dict[str, Any], max_changes: int | None) -> Plan:
        """Read ahead from ``start`` and report the complete units available (driver, per trigger).

        Parameters
        ----------
        start
            The start offset of the next batch.
        max_changes
            Read at least this many changes ahead when available (None: everything available).
        """

    @abc.abstractmethod
    def availability(self, cut: Cut) -> SnapshotAvailability:
        """FLIP-170: whether a checkpoint may be taken at ``cut`` of the last plan (driver)."""

    @abc.abstractmethod
    def batch(self, cut: Cut, checkpoint_id: int) -> PlannedBatch:
        """The batch ending at ``cut`` of the last plan, for checkpoint ``checkpoint_id``.

        Runs on the driver, once per batch; the next plan starts at its end.
        """

    @abc.abstractmethod
    def replan(self, start: dict[str, Any], end: dict[str, Any]) -> list[object]:
        """Partitions of a logged batch ``(start, end]`` planned by an earlier run (driver).

        After a restart Spark re-runs the batch its offset log ends with: the partitions must
        yield exactly the rows the first attempt planned, or the connector raises.
        """

    @abc.abstractmethod
    def read(self, partition: object) -> Iterator[pa.RecordBatch]:
        """Yield the rows of one partition as Arrow record batches (executor, per task)."""

    def resume(self, offset: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """The query resumes from ``offset``, its restored checkpoint's end (driver, once per run).

        Called before anything is read after a restart. A connector whose external position has
        moved past ``offset`` (so the data in between can no longer be read) must raise
        :class:`spark_ckpt.errors.RestoreError` instead of skipping it.
        """

    def prepare_available_now(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Fix the current end of the source as the target of ``Trigger.availableNow`` (driver)."""

    def commit(self, end: dict[str, Any]) -> None:  # noqa: B027 - optional hook
        """Spark has durably processed everything up to ``end`` (driver, per batch)."""

    def stop(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release resources (driver, once when the query stops)."""

    def status(self) -> dict[str, Any] | None:
        """The connector's health and progress for progress events (driver, per trigger).

        JSON-ready, camelCase; shown as ``status`` in ``sources[i].latestOffset`` of every
        progress event and kept in the history with each completed checkpoint. None: nothing
        to report.
        """
        return None
