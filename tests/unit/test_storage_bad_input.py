"""Bad storage input: each case is a typed error naming the location, never a credential.

An unknown scheme, an unreachable endpoint and a missing bucket are refused before anything is
staged or published: the sink checks its table, the Debezium connector its log, when a query
starts. Wrong credentials are not exercised here: the S3 server on loopback (moto) does not
check signatures.
"""

from __future__ import annotations

import pytest
from s3_server import SECRET_KEY, S3Server

from spark_ckpt.errors import SparkCkptError, StorageError
from spark_ckpt.sinks.options import SinkOptions
from spark_ckpt.sources.options import SourceOptions
from spark_ckpt.state.storage import Location, StorageOptions


def cases(server: S3Server, bucket: str) -> dict[str, tuple[str, dict[str, str], str]]:
    """Name -> (uri, storage options, what the message must say)."""
    good = server.options()
    return {
        "unknown scheme": ("hdfs://nn/lake/t", good, "scheme 'hdfs'"),
        "missing bucket": ("s3://no-such-bucket-7/t", good, "'no-such-bucket-7' does not exist"),
        "unreachable endpoint": (
            f"s3://{bucket}/t",
            {**good, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"},
            "cannot reach",
        ),
    }


@pytest.mark.parametrize("case", ["unknown scheme", "missing bucket", "unreachable endpoint"])
def test_the_sinks_table_is_checked_before_anything_is_staged(
    s3_server: S3Server, s3_bucket: str, case: str
) -> None:
    uri, storage, needle = cases(s3_server, s3_bucket)[case]

    def start() -> None:
        options = SinkOptions.parse(
            {"path": uri, "checkpointLocation": f"s3://{s3_bucket}/ckpt"},
            StorageOptions.of(storage),
        )
        options.table.check_reachable()  # what the writer does first on the driver

    with pytest.raises(StorageError) as info:
        start()
    message = str(info.value)
    assert needle in message
    assert uri.split("://")[1].split("/")[0] in message, "the message names the location"
    assert SECRET_KEY not in message
    assert SECRET_KEY not in repr(info.value)


@pytest.mark.parametrize("case", ["unknown scheme", "missing bucket", "unreachable endpoint"])
def test_the_debezium_log_is_checked_when_the_query_starts(
    s3_server: S3Server, s3_bucket: str, case: str
) -> None:
    uri, storage, needle = cases(s3_server, s3_bucket)[case]

    def start() -> None:
        options = SourceOptions.parse(
            {"connector": "debezium-json", "path": uri}, StorageOptions.of(storage)
        )
        options.connector_options.connector(options)

    with pytest.raises(SparkCkptError) as info:
        start()
    assert needle in str(info.value)
    assert SECRET_KEY not in str(info.value)


def test_an_empty_prefix_in_an_existing_bucket_is_an_empty_log(
    s3_server: S3Server, s3_bucket: str
) -> None:
    log = Location(f"s3://{s3_bucket}/nothing-yet", StorageOptions.of(s3_server.options()))
    log.check_reachable()
    assert log.list() == []
