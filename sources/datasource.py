"""The ``txn-cdc`` Python data source (registered statically through :mod:`pyspark_txn_cdc`)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from .options import SourceOptions
from .reader import TxnCdcStreamReader, make_connector
from .schema import SPARK_DDL

__all__ = ["TxnCdcDataSource"]


class TxnCdcDataSource(DataSource):
    """``spark.readStream.format("txn-cdc")``: transactional change data, cut on boundaries.

    Spark instantiates it on the driver for each query run; options are validated in
    :meth:`streamReader`, before the query's first batch.
    """

    @classmethod
    def name(cls) -> str:
        """The format name, ``txn-cdc``."""
        return "txn-cdc"

    def schema(self) -> str:
        """The common change schema of every connector (DESIGN.md §2)."""
        return SPARK_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Parse the options and build the reader (driver, once per query run)."""
        options = SourceOptions.parse(dict(self.options))
        return TxnCdcStreamReader(options, make_connector(options))
