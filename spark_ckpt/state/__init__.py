"""What spark-ckpt keeps on storage, with no pyspark.

Spark's checkpoint directory read, history, hooks' records, restore points and the control
plane's shared state.
"""
