"""Debezium's Kafka topics as a txn-cdc connector (``connector=kafka``)."""
