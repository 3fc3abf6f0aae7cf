"""The ``delta-2pc`` Python data source (registered statically through :mod:`pyspark_delta_2pc`)."""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter
from pyspark.sql.types import StructType

from spark_ckpt.registry import ControlState

from .options import SinkOptions
from .writer import Delta2pcStreamWriter

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
        """Parse the options, check the table and build the writer (driver)."""
        options = SinkOptions.parse(dict(self.options))
        return Delta2pcStreamWriter(options, schema, self.control_state)
