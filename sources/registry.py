"""The connectors ``txn-cdc`` knows, by option value: the one place the framework names them.

A connector is a folder under ``sources/`` with an options class (a
:class:`~spark_ckpt.sources.options.ConnectorOptions`) that knows the connector's own options and
builds it. Registering another connector is one line here. Entries are import paths, loaded on
first use by :func:`~spark_ckpt.sources.options.connector_options_class`, so choosing one
connector never imports another (psycopg, for one). Pure data: this module imports nothing.
"""

from __future__ import annotations

__all__ = ["CONNECTORS"]

CONNECTORS: dict[str, str] = {
    "debezium-json": "spark_ckpt.sources.debezium.options:DebeziumOptions",
    "kafka": "spark_ckpt.sources.kafka.options:KafkaOptions",
    "postgres": "spark_ckpt.sources.postgres.options:PostgresOptions",
}
"""Option value ``connector=...`` -> ``module:class`` of its options."""
