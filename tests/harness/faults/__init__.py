"""Fault injection: drivers in processes of their own, SIGKILLed at protocol points, and checks.

Each module runs as the driver itself (``python -m harness.faults.<module> drive ...``) and, from
a test or a benchmark, starts, kills and restarts such drivers, then checks what reached Delta:
the txn-cdc -> delta-2pc protocol points (:mod:`.crash`), mirror mode (:mod:`.mirror`), a log
Debezium is still writing (:mod:`.debezium`), and the postgres connector's snapshot and stream
(:mod:`.postgres`), incremental snapshot (:mod:`.postgres_incremental`) and schema changes
(:mod:`.postgres_schema`). :mod:`.jvm_archive` makes the drivers' short-lived JVMs start faster.
"""
