"""Bad storage input: each case is a typed error naming the location, never a credential.

An unknown scheme, an unreachable endpoint, a missing bucket and wrong credentials are refused
before anything is staged or published: the sink checks its table, the Debezium connector its
log, when a query starts. Wrong credentials need a server that checks signatures: a second S3
server of this module's own, with moto's IAM enforcement on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from harness.servers.s3 import SECRET_KEY, S3Server
from spark_ckpt.errors import SparkCkptError, StorageError
from spark_ckpt.sinks.options import SinkOptions
from spark_ckpt.sinks.places import SinkPlaces
from spark_ckpt.sources.options import SourceOptions
from spark_ckpt.sources.reader import make_connector
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
        SinkPlaces.of(options).table.check_reachable()  # what the writer does first on the driver

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
        make_connector(options)

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


@pytest.fixture(scope="module")
def strict_server() -> Iterator[S3Server]:
    """An S3 server that verifies every request's signature, like AWS."""
    server = S3Server(checks_credentials=True).start()
    yield server
    server.stop()


WRONG = {
    "wrong secret": {"AWS_SECRET_ACCESS_KEY": "not-the-secret-" + "x" * 16},
    "unknown access key": {"AWS_ACCESS_KEY_ID": "AKIANOSUCHKEY0000000"},
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_wrong_credentials_are_a_storage_error_naming_the_path(
    strict_server: S3Server, case: str
) -> None:
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    strict_server.create_bucket(bucket)
    good = strict_server.options()
    bad = StorageOptions.of({**good, **WRONG[case]})
    uri = f"s3://{bucket}/lake/orders"
    options = SinkOptions.parse({"path": uri, "checkpointLocation": f"s3://{bucket}/ck"}, bad)

    with pytest.raises(StorageError) as info:
        SinkPlaces.of(options).table.check_reachable()  # what the writer does first on the driver
    message = str(info.value)
    assert uri in message, "the message names the location"
    assert "refused these credentials" in message, message
    for secret in (strict_server.secret_key, WRONG[case].get("AWS_SECRET_ACCESS_KEY", "")):
        if secret:
            assert secret not in message
            assert secret not in repr(info.value)

    with pytest.raises(StorageError, match="refused these credentials"):
        Location(f"{uri}/staged.parquet", bad).write_bytes(b"never")
    source = SourceOptions.parse({"connector": "debezium-json", "path": f"s3://{bucket}/log"}, bad)
    with pytest.raises(SparkCkptError, match="refused these credentials"):
        make_connector(source)
    # Nothing reached the bucket: the right credentials see it empty.
    assert Location(f"s3://{bucket}", StorageOptions.of(good)).list(recursive=True) == []


def test_the_checking_server_accepts_its_own_credentials(strict_server: S3Server) -> None:
    """The control case: what the test above refuses is the key, not the server."""
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    strict_server.create_bucket(bucket)
    location = Location(f"s3://{bucket}/x", StorageOptions.of(strict_server.options()))
    location.check_reachable()
    location.write_bytes(b"ok")
    assert location.read_bytes() == b"ok"
