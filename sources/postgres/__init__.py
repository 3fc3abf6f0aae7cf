"""The ``postgres`` connector: PostgreSQL logical decoding (wal2json) with a snapshot phase."""
