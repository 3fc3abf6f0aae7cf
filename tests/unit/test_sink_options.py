"""delta-2pc options: parsed once, validated, errors naming option and value."""

from __future__ import annotations

import pytest

from spark_ckpt.errors import ConfigError, InvalidOptionError, StorageError, UnknownOptionError
from spark_ckpt.sinks.options import SinkOptions
from spark_ckpt.sinks.places import SinkPlaces
from spark_ckpt.state.storage import StorageOptions


def parse(**options: str) -> SinkOptions:
    base = {"path": "/lake/t", "checkpointlocation": "/ckpt/q"}
    return SinkOptions.parse({**base, **options})


def test_defaults() -> None:
    """Unpartitioned, 128 MiB files, no schema merge, one hour of orphan grace."""
    options = parse()
    assert (options.partition_by, options.target_file_size, options.merge_schema) == (
        (),
        128 << 20,
        False,
    )
    assert options.orphan_grace_period == 3600.0


def test_options_spark_adds_are_accepted() -> None:
    """DataStreamWriter.queryName reaches Python sinks as an option; it is not a typo."""
    assert parse(queryname="orders").path == "/lake/t"


def test_values_are_parsed() -> None:
    """Sizes take units, partition columns are a comma list, file: URIs become paths."""
    options = parse(
        path="file:///lake/t",
        partitionBy=" a, b ",
        targetFileSize="64m",
        mergeSchema="TRUE",
        orphanGracePeriod="10min",
    )
    assert options.path == "/lake/t"
    assert options.partition_by == ("a", "b")
    assert options.target_file_size == 64 << 20
    assert options.merge_schema is True
    assert options.orphan_grace_period == 600.0


def test_the_two_modes_differ_only_in_where_batches_are_logged() -> None:
    """Append mode logs into ``path``; mirror mode into the change log beside the mirrors."""
    append = parse(path="/lake/t")
    assert (append.mode, append.log_path, append.change_log, SinkPlaces.of(append).mirror) == (
        "append",
        "/lake/t",
        None,
        None,
    )
    mirror = parse(path="s3a://lake/root", mode="MIRROR")
    assert (mirror.mode, mirror.path, mirror.log_path) == (
        "mirror",
        "s3://lake/root",
        "s3://lake/root/_changes",
    )
    places = SinkPlaces.of(mirror)
    assert places.mirror is not None
    assert places.mirror.url == "s3://lake/root"
    elsewhere = parse(path="/lake/root", mode="mirror", changeLog="file:///logs/root")
    assert elsewhere.log_path == "/logs/root"
    assert SinkPlaces.of(elsewhere).table.url == "/logs/root"


def test_object_store_paths_and_storage_options() -> None:
    """s3a:// is S3 for delta-rs; storageOptions.<KEY> override the session's settings."""
    options = SinkOptions.parse(
        {
            "path": "s3a://lake/t",
            "checkpointLocation": "s3a://lake/ckpt",
            "storageOptions.AWS_REGION": "eu-west-1",
            "storageoptions.aws_secret_access_key": "s3cr3t",
        },
        StorageOptions.of({"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://h:9000"}),
    )
    assert options.path == "s3://lake/t"
    assert options.storage.get("AWS_REGION") == "eu-west-1"
    assert options.storage.get("AWS_ENDPOINT_URL") == "http://h:9000"
    assert "s3cr3t" not in repr(options), "a credential never reaches a message"
    assert SinkPlaces.of(options).table.delta_options()["AWS_CONDITIONAL_PUT"] == "etag"


def test_unsafe_rename_is_refused() -> None:
    """Two writers could commit one Delta version: refused before anything is staged."""
    with pytest.raises(ConfigError, match="AWS_S3_ALLOW_UNSAFE_RENAME"):
        parse(path="s3://lake/t", **{"storageOptions.AWS_S3_ALLOW_UNSAFE_RENAME": "true"})


@pytest.mark.parametrize(
    ("options", "error", "needle"),
    [
        ({"targetFileSize": "big"}, InvalidOptionError, "positive size"),
        ({"mergeSchema": "yes"}, InvalidOptionError, "true or false"),
        ({"partitionBy": "a,a"}, InvalidOptionError, "distinct"),
        ({"path": "hdfs://nn/t"}, StorageError, "scheme 'hdfs'"),
        ({"mergeschemma": "true"}, UnknownOptionError, "Did you mean 'mergeSchema'"),
        ({"orphanGracePeriod": "later"}, ConfigError, "orphanGracePeriod"),
    ],
)
def test_bad_options(options: dict[str, str], error: type[Exception], needle: str) -> None:
    """Bad values and unknown options say what is accepted."""
    with pytest.raises(error, match=needle):
        parse(**options)


def test_required_options() -> None:
    """Path and checkpointLocation are required, with how to give them."""
    with pytest.raises(ConfigError, match="needs the option 'path'"):
        SinkOptions.parse({"checkpointlocation": "/c"})
    with pytest.raises(ConfigError, match="needs the option 'checkpointLocation'"):
        SinkOptions.parse({"path": "/t"})
