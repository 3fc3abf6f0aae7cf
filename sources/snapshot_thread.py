"""The thread that takes a one-unit snapshot, with the progress it reports (driver).

A connector's ``snapshot=initial`` (postgres, mysql) reads its tables in one transaction on a
thread of the driver while the source declines checkpoints softly with the snapshot's progress.
:class:`SnapshotThread` is that thread's shape: its counters, its progress in words and JSON, the
error it ends with (re-raised by the connector on the query's thread) and a log line every few
seconds; the connector's subclass takes the snapshot in :meth:`SnapshotThread.take`.
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from typing import Generic, TypeVar

from spark_ckpt.model.availability import SnapshotAvailability

from .connector import Plan
from .snapshot_progress import SnapshotProgress

__all__ = ["SnapshotThread"]

ManifestT = TypeVar("ManifestT")

_LOG_EVERY = 10.0  # seconds between progress lines in the log


class SnapshotThread(threading.Thread, abc.ABC, Generic[ManifestT]):
    """Takes a snapshot in the background (driver, once per snapshot attempt).

    Parameters
    ----------
    name
        The thread's name.
    tables
        How many tables the snapshot reads.
    log
        Where progress lines go (the connector's logger).
    """

    def __init__(self, name: str, tables: int, log: logging.Logger) -> None:
        super().__init__(name=name, daemon=True)
        self.table_count = tables
        self.rows_read = 0
        self.rows_estimated: int | None = None
        self.tables_done = 0
        self.current_table: str | None = None
        self.error: BaseException | None = None
        self.manifest: ManifestT | None = None
        self._log = log
        self._logged_at = time.monotonic()

    def progress(self) -> SnapshotProgress:
        """How far the snapshot has got (any thread; the values are read without a lock)."""
        return SnapshotProgress(
            self.table_count,
            self.tables_done,
            self.rows_read,
            self.rows_estimated,
            self.current_table,
        )

    def describe(self) -> str:
        """Progress in words, for soft declines."""
        return f"snapshot in progress: {self.progress().summary}"

    def run(self) -> None:
        """Take the snapshot (its own thread); an error is kept for the connector to raise."""
        try:
            self.manifest = self.take()
        except BaseException as e:  # reported to the connector, which fails the query with it
            self.error = e

    def held_back(self, bounded: bool, oldest_held: str) -> Plan | None:
        """The source's plan while the snapshot is read; None once it is done (per trigger).

        The snapshot is read in one transaction: one open unit, growing as rows arrive, declined
        softly with its progress. ``bounded`` (a ``Trigger.availableNow`` run, which ends at the
        first trigger that offers nothing) waits for the snapshot instead.

        Raises
        ------
        BaseException
            The error the snapshot ended with (the caller forgets the task: the next plan
            takes the snapshot again).
        """
        if bounded:
            self.join()
        if self.is_alive():
            return Plan(
                [],
                SnapshotAvailability.soft_failure(self.describe()),
                self.rows_read,
                held_units=1,
                oldest_held=oldest_held,
            )
        if self.error is not None:
            raise self.error
        return None

    @abc.abstractmethod
    def take(self) -> ManifestT:
        """Read every table into the spill; the complete manifest (the task's thread)."""

    def log_progress(self, what: str) -> None:
        """A line with ``what`` and the progress, at most every few seconds (the task's thread)."""
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY:
            self._logged_at = now
            self._log.info("%s: %s", what, self.progress().summary)
