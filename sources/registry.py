"""The connectors ``txn-cdc`` knows, by option value: the one place the framework names them.

A connector is a folder under ``sources/`` with an options class (a
:class:`~spark_ckpt.sources.options.ConnectorOptions`: pure data, its options declared once) and a
builder (``build(options, common) -> ChangeConnector``, beside the connector it builds).
Registering another connector is one line here. Entries are import paths, loaded on first use,
so choosing one connector never imports another (psycopg, for one), and parsing options never
imports a connector. Pure data: this module imports nothing.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["CONNECTORS", "Registered"]


class Registered(NamedTuple):
    """Where one connector's parts are, as ``module:name`` import paths."""

    options: str
    """Its :class:`~spark_ckpt.sources.options.ConnectorOptions` subclass."""
    builder: str
    """Its ``build(options, common)``: the connector, checked (driver, once per query run)."""


CONNECTORS: dict[str, Registered] = {
    "debezium-json": Registered(
        "spark_ckpt.sources.debezium.options:DebeziumOptions",
        "spark_ckpt.sources.debezium.connector:build",
    ),
    "kafka": Registered(
        "spark_ckpt.sources.kafka.options:KafkaOptions",
        "spark_ckpt.sources.kafka.connector:build",
    ),
    "mysql": Registered(
        "spark_ckpt.sources.mysql.options:MySqlOptions",
        "spark_ckpt.sources.mysql.connector:build",
    ),
    "postgres": Registered(
        "spark_ckpt.sources.postgres.options:PostgresOptions",
        "spark_ckpt.sources.postgres.connector:build",
    ),
}
"""Option value ``connector=...`` -> where its options and its builder are."""
