"""The Spark glue: the only modules of ``spark_ckpt`` that import pyspark.

``install`` and the control plane, the ``StreamingQueryListener``, supervised queries and a
correctly configured local session.
"""
