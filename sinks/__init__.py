"""The ``delta-2pc`` streaming sink (installed as ``spark_ckpt.sinks``)."""
