"""The ``txn-cdc`` streaming source: a transaction-boundary gate and one module per connector.

Installed as ``spark_ckpt.sources``. Importing this package does not import PySpark; the Spark
glue lives in :mod:`spark_ckpt.sources.reader` and :mod:`spark_ckpt.sources.datasource`.
"""
