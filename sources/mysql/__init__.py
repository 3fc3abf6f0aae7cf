"""The ``mysql`` connector: MySQL's and MariaDB's binary log, read over the replication protocol."""
