r"""Recipe: Debezium to S3 to Delta mirrors (the section of that name in docs/deployment.md).

The debezium-writer (``tests/harness/peers/debezium-writer``, run with ``--out s3://BUCKET/cdc/``)
publishes Debezium's change records as whole ``NNNNNNNNNN.jsonl`` objects under one prefix; this
streams them with ``txn-cdc`` into ``delta-2pc`` in mirror mode: one Delta table per source table,
every table consistent with the others at every checkpoint. Run it beside the writer::

    export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... AWS_REGION=eu-west-1
    python examples/debezium-to-s3/mirror.py s3a://my-bucket/cdc s3a://my-bucket/lake \
        s3a://my-bucket/checkpoints/lake "public.customers:id;public.orders:id"

``AWS_ENDPOINT_URL`` (MinIO, another S3-compatible store) switches to that endpoint with
path-style requests. ``tests/integration/test_recipe_s3.py`` runs :func:`start_mirror` against
PostgreSQL, the writer and an S3 server, and checks that docs/deployment.md quotes it unchanged.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Mapping

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

import spark_ckpt


def start_mirror(
    spark: SparkSession,
    changes: str,  # s3a://my-bucket/cdc: the writer's --out s3://my-bucket/cdc/
    lake: str,  # s3a://my-bucket/lake: one Delta table per source table under it
    checkpoint: str,  # s3a://my-bucket/checkpoints/lake
    key_columns: str,  # "public.customers:id;public.orders:id"
    trigger: str = "10 seconds",
) -> StreamingQuery:
    """Stream the change files under ``changes`` into consistent Delta mirrors under ``lake``."""
    spark_ckpt.install(spark)  # spark-ckpt reads the session's fs.s3a.* settings
    source = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .option("keyColumns", key_columns)  # the files hold record values only: no keys
        .option("columnTypes", "true")  # typed mirrors, from the JSON envelope's schema
        .load(changes)
    )
    return (
        source.writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", lake)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=trigger)
        .start()
    )


# Reading: every table as of the same checkpoint (a transaction is in all of them or in none):
#     tables = spark_ckpt.read_consistent(spark, lake)  # {"public.orders": DataFrame, ...}
# (docs/deployment.md quotes this file from the pyspark imports to here: keep the two the same.)


def s3a_conf(env: Mapping[str, str]) -> dict[str, str]:
    """Spark's s3a settings for an endpoint and region given as AWS environment variables.

    Credentials are not copied: s3a and spark-ckpt both read ``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN`` (or an instance or container role)
    themselves.
    """
    conf = {}
    if env.get("AWS_REGION"):
        conf["spark.hadoop.fs.s3a.endpoint.region"] = env["AWS_REGION"]
    endpoint = env.get("AWS_ENDPOINT_URL")
    if endpoint:  # MinIO, moto, another S3-compatible store
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            endpoint.startswith("https://")
        ).lower()
    return conf


def main() -> None:
    """Run the mirror query until Ctrl-C, printing each table's row count now and then."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("changes", help="s3a://BUCKET/cdc: the writer's --out, as s3a://")
    parser.add_argument("lake", help="s3a://BUCKET/lake: the mirror root")
    parser.add_argument("checkpoint", help="s3a://BUCKET/checkpoints/lake")
    parser.add_argument("key_columns", help='"public.customers:id;public.orders:id"')
    parser.add_argument("--trigger", default="10 seconds")
    args = parser.parse_args()
    spark = spark_ckpt.local_session("debezium-to-s3", conf=s3a_conf(os.environ), s3a=True)
    query = start_mirror(
        spark, args.changes, args.lake, args.checkpoint, args.key_columns, args.trigger
    )
    try:
        while query.isActive:
            time.sleep(30)
            try:
                tables = spark_ckpt.read_consistent(spark, args.lake)
            except spark_ckpt.UsageError:
                continue  # nothing published yet
            print({name: frame.count() for name, frame in sorted(tables.items())}, flush=True)
        query.awaitTermination()  # raises the query's error, if it failed
    except KeyboardInterrupt:
        query.stop()


if __name__ == "__main__":
    main()
