"""Static registration of the ``txn-cdc`` format.

Spark imports every module on the Python path whose name starts with ``pyspark_`` and registers
its ``DefaultSource`` under ``DefaultSource.name()``, so ``spark.readStream.format("txn-cdc")``
works after ``pip install spark-ckpt`` with no register call.
"""

from spark_ckpt.sources.datasource import TxnCdcDataSource as DefaultSource

__all__ = ["DefaultSource"]
