"""delta-2pc mirror mode: one Delta table per source table, current rows by primary key."""
