"""The file systems behind locations: pyarrow's clients, local atomic writes, error meanings.

:class:`~spark_ckpt.state.storage.Location` is the one way spark-ckpt touches storage; this
module holds what it is built on: which pyarrow file system serves a URI and how it is
configured from :class:`StorageOptions` (:func:`file_system`; one shared per store in a process,
:func:`shared_file_system`), the local-disk writes that must
be atomic or durable (:func:`write_local_atomically`, :func:`create_local_exclusively`,
:class:`SyncedFile`), the object-store create-if-absent pyarrow lacks
(:func:`create_s3_object_exclusively`), and what a store's
error means (:func:`not_found`, :func:`describe_error`: "gone" versus "cannot read", and a
message that names what to check without showing credentials). Runs on the driver and on
executors.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import threading
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from spark_ckpt.errors import ConfigError, StorageError
from spark_ckpt.model.uris import split_uri
from spark_ckpt.state.storage_options import StorageOptions

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = [
    "SyncedFile",
    "create_local_exclusively",
    "create_s3_object_exclusively",
    "describe_error",
    "file_system",
    "not_found",
    "s3_endpoint",
    "shared_file_system",
    "split_uri",
    "write_local_atomically",
]


class SyncedFile(io.FileIO):
    """A local file that is fsynced when closed."""

    def close(self) -> None:
        """Flush, fsync and close (once)."""
        if not self.closed:
            self.flush()
            os.fsync(self.fileno())
        super().close()


_NOT_FOUND = (
    "Path does not exist",  # pyarrow, at the open (a HEAD that found nothing)
    "NoSuchKey",
    "NO_SUCH_KEY",  # a GET on AWS S3 of a key deleted after the open
    "RESOURCE_NOT_FOUND",  # the same from other S3 servers (moto, MinIO) and a 404 without body
    "BlobNotFound",  # Azure
)


def not_found(error: BaseException) -> bool:
    """True when ``error`` says the file (object) is not there, on any store."""
    if isinstance(error, FileNotFoundError) or getattr(error, "errno", None) == errno.ENOENT:
        return True
    text = str(error)
    return any(marker in text for marker in _NOT_FOUND)


_REFUSED = (
    "ACCESS_DENIED",
    "AccessDenied",
    "SIGNATURE_DOES_NOT_MATCH",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
    "INVALID_ACCESS_KEY_ID",
    "AuthorizationFailure",
    "AuthenticationFailed",
    "HTTP status 403",
    "403 Forbidden",
)


def describe_error(error: BaseException) -> str:
    """The first line of a store's error, with what to check when it refused the credentials."""
    text = str(error).strip() or type(error).__name__
    first = text.splitlines()[0][:500]
    if any(marker in text for marker in _REFUSED):
        # Say what to check; the store's own words ("No response body") rarely do.
        first += (
            "; the store refused these credentials: check the access key and secret "
            "(storageOptions.*, spark.hadoop.fs.s3a.*, or the environment's credential chain) "
            "and that they may read and write this bucket"
        )
    return first


def s3_endpoint(options: StorageOptions) -> str | None:
    """The S3 endpoint URL from the options, else the environment (None: AWS's own)."""
    endpoint = options.get("AWS_ENDPOINT_URL") or options.get("AWS_ENDPOINT_URL_S3")
    if endpoint is None:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint is None:
        return None
    if "://" not in endpoint:  # s3a's endpoints often have no scheme
        ssl = (options.get("AWS_SSL") or "true").lower() != "false"
        endpoint = ("https://" if ssl else "http://") + endpoint
    return endpoint.rstrip("/")


_AZURE = ("abfs", "abfss", "az")
_SHARED_LIMIT = 16
"""File systems :func:`shared_file_system` keeps per process (the most recently used)."""
_shared: OrderedDict[tuple[object, ...], pafs.FileSystem] = OrderedDict()
_shared_lock = threading.Lock()


def _forget_shared() -> None:
    # A client's connections and threads do not survive a fork (Spark's Python workers are
    # forked), and the lock may have been held by a thread the child does not have.
    global _shared_lock
    _shared.clear()
    _shared_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_shared)


def _azure_account(uri: str, options: StorageOptions) -> str | None:
    account = options.get("AZURE_STORAGE_ACCOUNT_NAME")
    _, rest = split_uri(uri)
    if account is None and "@" in rest:
        account = rest.partition("@")[2].split(".", 1)[0]
    return account


def _store_environment() -> tuple[tuple[str, str], ...]:
    """The environment variables a client may read (endpoints, credentials), as a cache key."""
    prefixes = ("AWS_", "GOOGLE_", "AZURE_")
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(prefixes)))


def shared_file_system(scheme: str, uri: str, options: StorageOptions) -> pafs.FileSystem:
    """The file system serving ``uri``: one per store, options and environment in a process.

    Runs wherever a location is first read or written (driver and executors), once per
    :class:`~spark_ckpt.state.storage.Location` object. A pyarrow client holds a connection pool:
    one client per location (a mirror's apply opens hundreds of files a batch) opened a
    connection, on S3 with a TLS handshake, for every file. pyarrow's file systems are safe to
    share between threads. Raises what :func:`file_system` raises.
    """
    key = (
        scheme,
        _azure_account(uri, options) if scheme in _AZURE else None,
        options,
        # A local file system reads no environment; scanning it cost 0.4 ms a lookup.
        () if scheme == "file" else _store_environment(),
    )
    with _shared_lock:
        found = _shared.get(key)
        if found is not None:
            _shared.move_to_end(key)
            return found
    made = file_system(scheme, uri, options)
    with _shared_lock:
        found = _shared.setdefault(key, made)
        _shared.move_to_end(key)
        while len(_shared) > _SHARED_LIMIT:
            _shared.popitem(last=False)
    return found


def file_system(scheme: str, uri: str, options: StorageOptions) -> pafs.FileSystem:
    """The pyarrow file system serving ``uri`` (a :class:`Location`'s canonical ``scheme``).

    Raises
    ------
    ConfigError
        An Azure URI that names no storage account.
    StorageError
        When pyarrow cannot set the client up (the message shows no credentials).
    """
    import pyarrow as pa
    import pyarrow.fs as pafs

    if scheme == "file":
        return pafs.LocalFileSystem()
    try:
        if scheme == "s3":
            return _s3(options)
        if scheme == "gs":
            return pafs.GcsFileSystem(
                **({"endpoint_override": e} if (e := options.get("GOOGLE_ENDPOINT_URL")) else {})
            )
        if scheme in _AZURE:
            account = _azure_account(uri, options)
            if account is None:
                raise ConfigError(
                    f"{uri!r} names no storage account: write abfss://container@account.dfs."
                    f"core.windows.net/path, or set storageOptions.AZURE_STORAGE_ACCOUNT_NAME"
                )
            key = options.get("AZURE_STORAGE_ACCOUNT_KEY")
            return pafs.AzureFileSystem(account, **({"account_key": key} if key else {}))
    except (OSError, ValueError, pa.ArrowException) as e:
        raise StorageError(
            f"cannot set up the {scheme} file system for {uri}: {describe_error(e)}"
        ) from e
    raise StorageError(f"no file system for {uri!r}")


def _s3(options: StorageOptions) -> pafs.S3FileSystem:
    import pyarrow.fs as pafs

    kwargs: dict[str, Any] = {}
    key, secret = options.get("AWS_ACCESS_KEY_ID"), options.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        kwargs["access_key"], kwargs["secret_key"] = key, secret
        if token := options.get("AWS_SESSION_TOKEN"):
            kwargs["session_token"] = token
    if region := (options.get("AWS_REGION") or options.get("AWS_DEFAULT_REGION")):
        kwargs["region"] = region
    endpoint = s3_endpoint(options)
    if endpoint is not None:
        parts = urlsplit(endpoint)
        kwargs["endpoint_override"] = parts.netloc + parts.path
        kwargs["scheme"] = parts.scheme or "https"
    if (options.get("AWS_PATH_STYLE") or "").lower() == "false":
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs)


def _write_temporary(directory: str, data: bytes) -> str:
    """A new temporary file in ``directory`` holding ``data``, fsynced; its path."""
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _fsync_directory(directory: str) -> None:
    """Make a rename or link in ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_local_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to the local ``path`` whole or not at all, durably.

    A temporary file in the same directory is written and fsynced, renamed over ``path`` and
    the directory fsynced, so a reader sees the old or the new bytes, never a part.
    """
    directory = os.path.dirname(path) or "."
    tmp = _write_temporary(directory, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


def create_local_exclusively(path: str, data: bytes) -> bool:
    """Create the local ``path`` holding ``data`` unless it exists; False when it was there.

    A temporary file is written whole and fsynced, then hard-linked to ``path``: the link fails
    when ``path`` exists (as ``O_EXCL`` would), and a reader never sees a part of the file (as
    it could between an ``O_EXCL`` create and its write). So two writers racing for one name
    settle with exactly one winner, as a Delta commit needs.
    """
    directory = os.path.dirname(path) or "."
    tmp = _write_temporary(directory, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _fsync_directory(directory)
    return True


def create_s3_object_exclusively(path: str, delta_options: dict[str, str], data: bytes) -> bool:
    """Create the S3 object ``path`` (``bucket/key``) holding ``data`` unless it exists.

    One PUT with ``If-None-Match: *`` through obstore (the ``object_store`` crate delta-rs
    commits with), configured from delta-rs's options of the location, so it reaches the same
    endpoint with the same credentials and the same ``AWS_CONDITIONAL_PUT``. False when the
    object was there (the store answered 412).

    Raises
    ------
    StorageError
        When the options name a locking provider instead of conditional puts (the PUT could not
        be conditional), or the store refuses the PUT.
    """
    if "AWS_S3_LOCKING_PROVIDER" in delta_options:
        raise StorageError(
            f"cannot create s3://{path} only if absent: the options use a locking provider "
            f"(AWS_S3_LOCKING_PROVIDER) instead of conditional puts. Remove it; AWS S3 and "
            f"MinIO support conditional puts"
        )
    # Imported here: only a publishing driver needs it, and every executor's Python worker
    # imports this module (about 50 ms saved there).
    import obstore
    from obstore.exceptions import AlreadyExistsError
    from obstore.store import S3Store

    bucket, _, key = path.partition("/")
    config = {name.lower(): value for name, value in delta_options.items()}
    store = S3Store(bucket, config=config)  # type: ignore[arg-type]  # a plain dict of str
    try:
        obstore.put(store, key, data, mode="create")
    except AlreadyExistsError:
        return False
    return True
