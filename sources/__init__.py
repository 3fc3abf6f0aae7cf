"""The ``txn-cdc`` streaming source (installed as ``spark_ckpt.sources``).

The framework sits at the top: :mod:`.connector` (what a connector provides), :mod:`.gate`
(where a batch may end), :mod:`.offsets` and :mod:`.partitions` (what both connectors share),
:mod:`.schema` (the output schema), :mod:`.options`, and :mod:`.registry` (the connectors by
name). The Spark glue is :mod:`.reader` and :mod:`.datasource`. Each connector is a folder:
:mod:`.debezium`, :mod:`.postgres`. Importing this package, the framework's pure modules or a
connector does not import PySpark.
"""
