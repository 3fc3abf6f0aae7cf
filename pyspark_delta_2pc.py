"""Static registration of the ``delta-2pc`` format (see :mod:`pyspark_txn_cdc`)."""

from spark_ckpt.sinks.datasource import Delta2pcDataSource as DefaultSource

__all__ = ["DefaultSource"]
