"""Helpers for testing pipelines built on spark-ckpt (like ``pyspark.testing``).

Generators of Debezium-format change logs, and the crash points the crash tests use.
"""
