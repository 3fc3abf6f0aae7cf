"""The storage layer, on a local directory and on a real S3-protocol server (moto, loopback).

Every behaviour is checked on both stores with the same test, so what spark-ckpt relies on
(whole-object writes, listing with sizes, reads of missing objects) holds on either.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.servers.s3 import SECRET_KEY, S3Server
from spark_ckpt.errors import ConfigError, StorageError
from spark_ckpt.state import file_systems
from spark_ckpt.state.storage import Location, StorageOptions, iter_chunks, s3a_options


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Location:
    """A fresh, empty location on each kind of store."""
    if request.param == "local":
        return Location(str(tmp_path / "root"))
    server: S3Server = request.getfixturevalue("s3_server")
    bucket: str = request.getfixturevalue("s3_bucket")
    return Location(f"s3a://{bucket}/root", StorageOptions.of(server.options()))


def test_whole_files_round_trip_and_missing_ones_read_as_none(root: Location) -> None:
    """write_bytes then read_bytes gives the bytes back; a file never written reads as None."""
    target = root.child("a", "b.json")
    assert target.read_bytes() is None
    target.write_bytes(b'{"x": 1}')
    assert target.read_bytes() == b'{"x": 1}'
    target.write_bytes(b"2")
    assert target.read_bytes() == b"2"
    assert target.exists()


def test_listing_gives_names_below_the_location_and_sizes(root: Location) -> None:
    """Files list by relative name with their sizes, sorted; a missing prefix lists as []."""
    assert root.child("nothing").list() == []
    root.child("d", "2").write_bytes(b"22")
    root.child("d", "10").write_bytes(b"1")
    root.child("d", "sub", "x").write_bytes(b"xyz")
    assert [(e.name, e.size) for e in root.child("d").list()] == [("10", 1), ("2", 2)]
    nested = [(e.name, e.size) for e in root.child("d").list(recursive=True)]
    assert nested == [("10", 1), ("2", 2), ("sub/x", 3)]


def test_delete_says_whether_there_was_something(root: Location) -> None:
    """Deleting a file returns True once and False after; delete_tree removes a prefix."""
    target = root.child("gone")
    target.write_bytes(b"x")
    assert target.delete()
    assert not target.delete()
    root.child("tree", "a").write_bytes(b"1")
    root.child("tree", "b", "c").write_bytes(b"2")
    root.child("tree").delete_tree()
    assert root.child("tree").list(recursive=True) == []


def test_streams_write_and_read_ranges(root: Location) -> None:
    """A file written through a stream is read back in ranges (as log readers do)."""
    target = root.child("log.jsonl")
    with target.open_output() as out:
        out.write(b"0123456789")
    assert b"".join(iter_chunks(target, 2, 9, chunk=3)) == b"2345678"


def test_create_bytes_creates_once_and_never_overwrites(root: Location) -> None:
    """Of two creates of one name the first wins; the second says False and changes nothing."""
    target = root.child("_delta_log", "00000000000000000001.json")
    assert target.create_bytes(b"first")
    assert not target.create_bytes(b"second")
    assert target.read_bytes() == b"first"
    assert [e.name for e in root.child("_delta_log").list()] == [target.name]


def test_racing_creators_of_one_name_have_exactly_one_winner(root: Location) -> None:
    """Eight threads create one commit file at once: one True, seven False, the winner's bytes."""
    target = root.child("_delta_log", "00000000000000000007.json")
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda i: target.create_bytes(f"writer {i}".encode()), range(8)))
    assert won.count(True) == 1
    assert target.read_bytes() == f"writer {won.index(True)}".encode()


def test_create_bytes_where_no_conditional_write_is_wired_is_refused() -> None:
    """A store without a create-if-absent here (GCS) is refused before any request."""
    with pytest.raises(StorageError, match="no conditional write for gs"):
        Location("gs://bucket/t/_delta_log/00000000000000000001.json").create_bytes(b"x")


def test_a_location_pickles_without_its_client(root: Location) -> None:
    """Executors get the URI and options; the client is rebuilt there, in another process."""
    target = root.child("shared")
    target.write_bytes(b"from the driver")
    assert target.fs is not None  # the client exists here...
    payload = pickle.dumps(target)
    code = (
        "import pickle, sys\n"
        "loc = pickle.loads(sys.stdin.buffer.read())\n"
        "sys.stdout.buffer.write(loc.read_bytes())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=payload, capture_output=True, timeout=60, check=True
    )
    assert out.stdout == b"from the driver"


def test_locations_of_one_store_share_a_client_until_options_or_environment_differ(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One pyarrow client (one connection pool) per store, options and environment.

    A forked process (Spark's Python workers are forked) starts with none of its parent's.
    """
    options = StorageOptions.of(
        {
            "AWS_ACCESS_KEY_ID": "key",
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        }
    )
    first = Location("s3://bucket/table/part-0.parquet", options).fs
    assert Location("s3a://other-bucket/x", options).fs is first
    assert Location("s3://bucket/t", StorageOptions.of({"AWS_REGION": "eu-west-1"})).fs is not first
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:10")
    assert Location("s3://bucket/t", options).fs is not first
    assert Location("/tmp/a").fs is Location("/var/b").fs
    parent = Location("s3://bucket/table", options)
    assert parent.child("part-1.parquet").fs is parent.fs, "a child is served by its parent's"
    local = Location("/tmp/a").fs
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    assert Location("/tmp/c").fs is local, "a local file system's key has no environment"
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's exit status is the assertion)
        os._exit(0 if not file_systems._shared else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "a forked process kept its parent's clients"


@pytest.mark.parametrize(
    ("uri", "url"),
    [
        ("/lake/t", "/lake/t"),
        ("file:///lake/t", "/lake/t"),
        ("file:/lake/t/", "/lake/t"),
        ("s3a://bucket/lake/t", "s3://bucket/lake/t"),
        ("s3://bucket/lake/t/", "s3://bucket/lake/t"),
        ("gs://bucket/t", "gs://bucket/t"),
        ("abfss://c@acct.dfs.core.windows.net/t", "abfss://c@acct.dfs.core.windows.net/t"),
    ],
)
def test_uris_are_canonical(uri: str, url: str) -> None:
    """s3a:// is s3:// to delta-rs; local URIs become absolute paths."""
    assert Location(uri).url == url


def test_an_unknown_scheme_is_a_storage_error_that_names_it() -> None:
    """hdfs:// (or a typo) is refused with the schemes that work."""
    with pytest.raises(StorageError, match="'hdfs'") as info:
        Location("hdfs://nn/lake/t")
    assert "s3a://" in str(info.value)
    assert isinstance(info.value, OSError)


def test_a_missing_bucket_is_a_storage_error_without_credentials(s3_server: S3Server) -> None:
    """The error names the location and what the store said, never the secret."""
    target = Location("s3://no-such-bucket/t/x", StorageOptions.of(s3_server.options()))
    with pytest.raises(StorageError) as info:
        target.write_bytes(b"x")
    assert "s3://no-such-bucket/t/x" in str(info.value)
    assert SECRET_KEY not in str(info.value)


def test_an_unreachable_endpoint_is_a_storage_error() -> None:
    """Nothing listens on the endpoint: a StorageError naming the location, no secret."""
    options = StorageOptions.of(
        {
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
        }
    )
    with pytest.raises(StorageError) as info:
        Location("s3://bucket/x", options).write_bytes(b"x")
    assert "s3://bucket/x" in str(info.value)
    assert SECRET_KEY not in str(info.value)


def test_storage_options_never_print_secrets() -> None:
    """Keys, secrets and tokens are masked in repr and str; endpoints and regions are not."""
    options = StorageOptions.of(
        {"aws_secret_access_key": SECRET_KEY, "AWS_REGION": "eu-west-1"},
        {"AWS_SESSION_TOKEN": "tok", "AZURE_STORAGE_ACCOUNT_KEY": "k2"},
    )
    for text in (repr(options), str(options), repr(Location("s3://b/x", options))):
        assert SECRET_KEY not in text
        assert "tok" not in text.replace("TOKEN", "")
        assert "k2" not in text
    assert "eu-west-1" in repr(options)
    assert options.get("aws_secret_access_key") == SECRET_KEY


def test_sparks_s3a_keys_become_storage_options() -> None:
    """The session's spark.hadoop.fs.s3a.* settings map to delta-rs's names."""
    conf = {
        "spark.hadoop.fs.s3a.endpoint": "127.0.0.1:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.access.key": "AK",
        "spark.hadoop.fs.s3a.secret.key": "SK",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
    }
    options = StorageOptions.of(s3a_options(conf))
    delta = Location("s3a://b/t", options).delta_options()
    assert delta["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert delta["AWS_ALLOW_HTTP"] == "true"
    assert delta["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "false"
    assert (delta["AWS_ACCESS_KEY_ID"], delta["AWS_SECRET_ACCESS_KEY"]) == ("AK", "SK")


def test_delta_commits_on_s3_are_conditional_and_never_unsafe() -> None:
    """Conditional puts by default; a DynamoDB lock is kept; unsafe rename is refused."""
    assert Location("s3://b/t").delta_options()["AWS_CONDITIONAL_PUT"] == "etag"
    dynamo = StorageOptions.of({"AWS_S3_LOCKING_PROVIDER": "dynamodb"})
    assert "AWS_CONDITIONAL_PUT" not in Location("s3://b/t", dynamo).delta_options()
    unsafe = StorageOptions.of({"AWS_S3_ALLOW_UNSAFE_RENAME": "true"})
    with pytest.raises(ConfigError, match="exactly-once"):
        Location("s3://b/t", unsafe).delta_options()
