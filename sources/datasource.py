"""The ``txn-cdc`` Python data source (registered statically through :mod:`pyspark_txn_cdc`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceStreamReader

from spark_ckpt.model.change_rows import spark_ddl

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from spark_ckpt.state.registry import ControlState

__all__ = ["TxnCdcDataSource"]


class TxnCdcDataSource(DataSource):
    """``spark.readStream.format("txn-cdc")``: transactional change data, cut on boundaries.

    Spark instantiates it on the driver when ``load()`` runs (in a Python worker); options are
    validated in :meth:`streamReader`, before the query's first batch.
    """

    control_state: ClassVar[ControlState | None] = None
    """Set on the subclass ``spark_ckpt.install`` registers; None when registered statically."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        if self.control_state is not None:
            # Created inside a supervisor's build(): remember whom this source serves.
            self.control_state.claim_identity(self.options)

    @classmethod
    def name(cls) -> str:
        """The format name, ``txn-cdc``."""
        return "txn-cdc"

    def schema(self) -> str:
        """The common change schema of every connector (DESIGN.md §2), ``column_types`` if asked.

        A bad ``columnTypes`` value is refused by ``streamReader`` with the other options.
        """
        asked = str(self.options.get("columnTypes", "false")).strip().lower() == "true"
        return spark_ddl(asked)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Parse the options and build the reader (driver, once per query run)."""
        # Imported here: Spark imports this module in the processes that look the format up
        # and create the source, which need only its name and schema (not pyarrow, the
        # connectors and their clients: about 0.5 s of CPU in each of those processes).
        from .options import SourceOptions
        from .reader import TxnCdcStreamReader, make_connector

        storage = self.control_state.storage if self.control_state is not None else None
        options = SourceOptions.parse(dict(self.options), storage)
        return TxnCdcStreamReader(options, make_connector(options), self.control_state)
