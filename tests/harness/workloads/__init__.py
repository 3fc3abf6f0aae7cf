"""What the tests write and read: workloads on the servers, producers of logs, readers of Delta.

Transactions on PostgreSQL and their checks (:mod:`.postgres`), Debezium's embedded engine as a
real producer of change files (:mod:`.debezium`), generated change logs and the supervised
queries over them (:mod:`.streams`), and what each Delta version added (:mod:`.delta_versions`).
"""
