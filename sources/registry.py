"""The connectors ``txn-cdc`` knows, by option value: the one place the framework names them.

A connector is a folder under ``sources/`` with an options class (a
:class:`~spark_ckpt.sources.options.ConnectorOptions`) that knows the connector's own options and
builds it. Registering a third connector is one line here. Entries are import paths, loaded on
first use, so choosing one connector never imports another (psycopg, for one).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .options import ConnectorOptions

__all__ = ["CONNECTORS", "connector_options_class"]

CONNECTORS: dict[str, str] = {
    "debezium-json": "spark_ckpt.sources.debezium.options:DebeziumOptions",
    "kafka": "spark_ckpt.sources.kafka.options:KafkaOptions",
    "postgres": "spark_ckpt.sources.postgres.options:PostgresOptions",
}
"""Option value ``connector=...`` -> ``module:class`` of its options."""


def connector_options_class(connector: str) -> type[ConnectorOptions]:
    """The options class of ``connector`` (driver; imports the connector's options module)."""
    module, _, name = CONNECTORS[connector].partition(":")
    cls: type[ConnectorOptions] = getattr(importlib.import_module(module), name)
    return cls
