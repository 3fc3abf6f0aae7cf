"""The ``debezium-json`` connector: a directory of Debezium-format ``*.jsonl`` change files."""
