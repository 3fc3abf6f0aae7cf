"""The ``delta-2pc`` Python data source (registered statically through :mod:`pyspark_delta_2pc`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter

from spark_ckpt.errors import UnsupportedOutputModeError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from spark_ckpt.state.registry import ControlState

__all__ = ["Delta2pcDataSource"]


class Delta2pcDataSource(DataSource):
    """``df.writeStream.format("delta-2pc")``: a batch becomes visible only once it is complete."""

    control_state: ClassVar[ControlState | None] = None
    """Set on the subclass ``spark_ckpt.install`` registers; None when registered statically."""

    @classmethod
    def name(cls) -> str:
        """The format name, ``delta-2pc``."""
        return "delta-2pc"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Parse the options, check the table and build the writer (driver, once per query run).

        Only ``outputMode("append")`` is implemented. Spark asks for ``overwrite`` in complete
        mode, where every batch would have to replace the table: refused here, before anything
        is staged. Update mode never gets this far: Spark itself refuses it for every Python sink
        ("does not support Update mode"), since they cannot upsert by key.

        Raises
        ------
        UnsupportedOutputModeError
            In complete mode.
        """
        if overwrite:
            raise UnsupportedOutputModeError(
                "delta-2pc implements outputMode('append') only, but the query runs in "
                "outputMode('complete'), where every batch would replace the whole table; "
                "appending each batch's full result instead would silently pile up copies. "
                "Use outputMode('append') (with a watermark for aggregations), or write the "
                "complete result with foreachBatch and delta's overwrite mode"
            )
        # Imported here: Spark imports this module in the process that looks the format up,
        # which needs only its name (not pyarrow and delta-rs: about 0.5 s of CPU there).
        from .options import SinkOptions
        from .writer import Delta2pcStreamWriter

        storage = self.control_state.storage if self.control_state is not None else None
        options = SinkOptions.parse(dict(self.options), storage)
        return Delta2pcStreamWriter(options, schema, self.control_state)
