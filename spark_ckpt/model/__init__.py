"""The pure checkpoint model: rules with no pyspark and no I/O, tested without a JVM.

FLIP-170 availability, failure reasons and the failure manager, restart strategies, declines,
``spark.ckpt.*`` configuration and durations.
"""
