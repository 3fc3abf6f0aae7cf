"""Where a ``delta-2pc`` query writes, as locations of the storage layer (runtime).

:class:`~spark_ckpt.sinks.options.SinkOptions` are data (they import no storage code); this turns
them into the places the writer reaches: the Delta table every batch is appended to, the mirror
root in mirror mode, and the query's checkpoint. Built on the driver once per writer and pickled
to executors with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.storage import Location

from .options import SinkOptions

__all__ = ["SinkPlaces"]


@dataclass(frozen=True)
class SinkPlaces:
    """The sink's locations.

    Attributes
    ----------
    table
        :attr:`SinkOptions.log_path`: the table in append mode, the change log in mirror mode.
    mirror
        The mirror root (mirror mode), else None.
    checkpoint
        The query's checkpoint location.
    """

    table: Location
    mirror: Location | None
    checkpoint: SparkCheckpoint

    @classmethod
    def of(cls, options: SinkOptions) -> SinkPlaces:
        """The places ``options`` name, reached with their storage options."""
        return cls(
            Location(options.log_path, options.storage),
            Location(options.path, options.storage) if options.mode == "mirror" else None,
            SparkCheckpoint(options.checkpoint_location, options.storage),
        )
