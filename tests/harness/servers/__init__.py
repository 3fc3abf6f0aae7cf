"""Throwaway servers on loopback, each in its own directory, stopped by the test that started it.

PostgreSQL (:mod:`.postgres`), MariaDB (:mod:`.mariadb`), an S3-protocol server (:mod:`.s3`),
Apache Kafka and Kafka Connect (:mod:`.kafka`, :mod:`.kafka_connect`) and a Spark standalone
cluster (:mod:`.spark_cluster`, whose executors run :mod:`.cluster_env`'s packed environment);
:mod:`.loopback` picks their ports and :mod:`.maven` builds the Java peers under
``tests/harness/peers/`` they run from.
"""
