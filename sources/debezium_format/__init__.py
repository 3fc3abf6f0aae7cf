"""Debezium's change-event format, shared by every connector that reads it.

The envelope and its logical types (:mod:`.types`), the schemas a record carries and the schema
changes they show (:mod:`.envelope_schemas`, with MySQL's DDL in :mod:`.mysql_ddl`), and the
native decoder (``_native``, Rust): events, transaction metadata (BEGIN/END with their counts),
the assembly of whole transactions, and the snapshot and incremental-snapshot markers. The
``debezium-json`` connector (files Debezium Server wrote) and the ``kafka`` connector (topics
Kafka Connect wrote) build on it as equals, as Flink CDC builds on ``flink-connector-debezium``
and Debezium's connectors on its core ``pipeline`` package. It imports no connector.
"""
