"""Logical decoding, one module per output plugin behind one interface.

:class:`.plugin.OutputPlugin` is what the connector asks of a plugin: how a slot is peeked with
it, how its rows group into committed transactions (driver, :mod:`.peek`), and how the stored
changes render into the output's columns (executors). :mod:`.wal2json` and :mod:`.pgoutput`
implement it; :func:`.by_name.output_plugin` picks one by the option ``plugin``. Debezium's
PostgreSQL connector has the same split (``connection/`` with one ``MessageDecoder`` per plugin).
"""
