"""One storage layer for every byte spark-ckpt reads or writes, on local disks and object stores.

A :class:`Location` is a URI (``/lake/t``, ``file:/lake/t``, ``s3://bucket/t``, ``s3a://...``,
``gs://...``, ``abfss://container@account.dfs.core.windows.net/t``, ``az://...``) plus the
:class:`StorageOptions` that reach it (endpoint, region, credentials). Everything goes through
pyarrow's file systems (``pyarrow.fs``): the same C++ clients write the staged Parquet files, so
one configuration serves reads, writes and the Parquet writer; delta-rs gets the same options in
its own spelling (:meth:`Location.delta_options`) for the Delta commits.

Object stores have no rename, no lock and no append. So the layer offers only what every store
does atomically: write a whole object (:meth:`Location.write_bytes`; a local file is written to a
temporary name and renamed, so readers see the old or the new bytes, never a part), read one,
list a prefix, delete. Callers name objects so that an overwrite is impossible or harmless.

Object stores are not POSIX at the read either. pyarrow opens an object with a HEAD request and
reads it with GETs, so an object deleted after the open fails the next read (a local file that
was opened stays readable). Every read here therefore translates the store's errors where the
bytes are read, not only at the open: into :class:`StorageNotFoundError` when the object is not
there (any more), so that callers can tell "gone" (a concurrent publisher finished the batch and
deleted what it staged) from "cannot read" (:class:`~spark_ckpt.errors.StorageError`). Callers
never see pyarrow's raw ``OSError``: they read through :meth:`Location.read_bytes`,
:meth:`Location.read_parquet`, :func:`iter_chunks`, or the :class:`InputFile` that
:meth:`Location.open_input` returns.

Options come from where users already keep them, later ones overriding earlier:

1. the standard environment variables and credential chains (pyarrow and delta-rs read them
   themselves: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
   ``AWS_REGION``, ``AWS_ENDPOINT_URL``, instance profiles; ``GOOGLE_APPLICATION_CREDENTIALS``;
   ``AZURE_STORAGE_ACCOUNT_KEY``, ...);
2. Spark's ``spark.hadoop.fs.s3a.*`` keys of the session (captured by ``spark_ckpt.install``);
3. a source's or sink's ``storageOptions.<key>`` options.

A secret never reaches a log or an error: :class:`StorageOptions` masks them when printed, and
errors name the location without its options.

Pure Python over pyarrow; runs on the driver and on executors. A :class:`Location` pickles
without its file-system client, which is rebuilt on first use in the receiving process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, cast

from spark_ckpt.errors import StorageError, StorageNotFoundError
from spark_ckpt.model.uris import SCHEMES, canonical_uri, check_uri, child_uri, split_uri
from spark_ckpt.state.file_systems import (
    SyncedFile,
    create_local_exclusively,
    create_s3_object_exclusively,
    describe_error,
    not_found,
    s3_endpoint,
    shared_file_system,
    write_local_atomically,
)
from spark_ckpt.state.input_file import InputFile
from spark_ckpt.state.parquet_rows import row_group_positions
from spark_ckpt.state.storage_options import (
    S3A_KEYS,
    StorageOptions,
    refuse_unsafe_settings,
    s3a_options,
)

# pyarrow is imported where a file is touched, not with this module: Spark starts a Python
# process to look the data sources up (at every session's start) and one to create each
# (at every load()), which import this module through spark_ckpt and touch no file; pyarrow
# with numpy cost about 0.4 s of CPU in each.
if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.fs as pafs

__all__ = [
    "COPY_CHUNK",
    "S3A_KEYS",
    "SCHEMES",
    "Entry",
    "InputFile",
    "Location",
    "StorageNotFoundError",
    "StorageOptions",
    "iter_chunks",
    "s3a_options",
]

COPY_CHUNK = 8 << 20
"""Files up to this size are copied whole; larger ones are streamed in chunks of this size."""

"""URI schemes a location may have (no scheme: a local path)."""


@dataclass(frozen=True)
class Entry:
    """A file (object) found by :meth:`Location.list`.

    Its name relative to the listed location, its size and its modification time.
    """

    name: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Location:
    """A place on a file system: a local directory or file, or an object-store prefix or object.

    Parameters
    ----------
    uri
        As the user wrote it (``/lake/t``, ``file:/lake/t``, ``s3a://bucket/t``, ...).
    options
        How to reach it.

    Raises
    ------
    StorageError
        For a scheme no store here supports (the message names it and the supported ones).
    """

    uri: str
    options: StorageOptions = field(default_factory=StorageOptions)

    def __post_init__(self) -> None:
        check_uri(self.uri)

    # -- identity -------------------------------------------------------------------------

    @property
    def scheme(self) -> str:
        """``file``, ``s3``, ``gs``, ``abfss``, ... (``s3a`` counts as ``s3``)."""
        scheme = split_uri(self.uri)[0]
        return "s3" if scheme == "s3a" else "gs" if scheme == "gcs" else scheme

    @property
    def is_local(self) -> bool:
        """True for a path on the local (or a mounted) file system."""
        return self.scheme == "file"

    @property
    def creates_exclusively(self) -> bool:
        """Whether :meth:`create_bytes` works here (local disks and S3)."""
        return self.is_local or self.scheme == "s3"

    @property
    def path(self) -> str:
        """The location's path on its file system (``bucket/prefix`` on object stores)."""
        scheme, rest = split_uri(self.uri)
        if scheme == "file":
            return os.path.abspath(rest)
        if self.scheme in ("abfs", "abfss"):
            container, _, account_path = rest.partition("@")
            _, _, path = account_path.partition("/")
            return f"{container}/{path}".rstrip("/")
        return rest.rstrip("/")

    @property
    def url(self) -> str:
        """The canonical URI: an absolute local path, or ``s3://`` for ``s3a://`` (delta-rs)."""
        return canonical_uri(self.uri)

    def __str__(self) -> str:
        return self.url

    def child(self, *parts: str) -> Location:
        """The location ``parts`` below this one (served by this one's file system, once known).

        Looking a file system up costs a scan of the environment (its key): a mirror's apply
        makes a child location per file it reads, two thousand a batch on a large table.
        """
        child = Location(child_uri(self.uri, *parts), self.options)
        known = self.__dict__.get("_fs")
        if known is not None:
            object.__setattr__(child, "_fs", known)
        return child

    @property
    def name(self) -> str:
        """The last path component."""
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    # -- the file system --------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self.uri, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "uri", state["uri"])
        object.__setattr__(self, "options", state["options"])

    @property
    def fs(self) -> pafs.FileSystem:
        """The pyarrow file system serving this location (one per store and options per process)."""
        cached = self.__dict__.get("_fs")
        if cached is None:
            cached = shared_file_system(self.scheme, self.uri, self.options)
            object.__setattr__(self, "_fs", cached)
        return cached

    def delta_options(self) -> dict[str, str]:
        """Options for delta-rs (``storage_options``) to reach this location.

        On S3, commits use conditional puts (``If-None-Match``; AWS S3 and MinIO support them),
        so concurrent writers of one table are safe without a lock table. An explicit
        ``AWS_S3_LOCKING_PROVIDER`` (DynamoDB) is kept. Unsafe renames are refused.
        """
        if self.is_local:
            return {}
        options = self.options.as_dict()
        options.pop("AWS_PATH_STYLE", None)
        options.pop("AWS_SSL", None)
        if self.scheme == "s3":
            refuse_unsafe_settings(self.uri, self.options)
            if "AWS_S3_LOCKING_PROVIDER" not in options:
                options.setdefault("AWS_CONDITIONAL_PUT", "etag")
            endpoint = s3_endpoint(self.options)
            if endpoint is not None:
                options["AWS_ENDPOINT_URL"] = endpoint
                if endpoint.startswith("http://"):
                    options.setdefault("AWS_ALLOW_HTTP", "true")
            if (self.options.get("AWS_PATH_STYLE") or "").lower() == "true":
                options.setdefault("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false")
        return options

    # -- reading -------------------------------------------------------------------------

    def _fail(self, what: str, error: BaseException) -> StorageError:
        # The error names the location, never its options (they may hold credentials).
        kind = StorageNotFoundError if not_found(error) else StorageError
        return kind(f"cannot {what} {self.url}: {describe_error(error)}")

    def _read_failure(self, error: OSError) -> StorageError:
        """The typed error for ``error``, raised by a read of this file after it was opened.

        The store's message does not always say "not found": a ranged GET of a deleted object
        whose 404 body does not fit the read's buffer fails as ``AWS Error INTERNAL_FAILURE ...
        Failed to flush response stream``, its status lost. So a failed read asks the store
        whether the object is still there (one request, on the error path only).
        """
        import pyarrow.fs as pafs

        if not_found(error):
            return self._fail("read", error)
        try:
            gone = self.fs.get_file_info(self.path).type == pafs.FileType.NotFound
        except OSError:
            gone = False  # the store cannot say: report what the read said
        if gone:
            why = describe_error(error)
            return StorageNotFoundError(
                f"cannot read {self.url}: it was deleted after it was opened ({why})"
            )
        return self._fail("read", error)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Translate what a read of this file raises into the storage layer's errors."""
        try:
            yield
        except StorageError:
            raise
        except OSError as e:
            raise self._read_failure(e) from e

    def info(self) -> pafs.FileInfo:
        """The file system's information about this location."""
        try:
            return self.fs.get_file_info(self.path)
        except OSError as e:
            raise self._fail("look at", e) from e

    def check_reachable(self) -> None:
        """Fail early, naming the location, when its store cannot be reached (driver, at start).

        On an object store: the endpoint answers, the credentials are accepted and the bucket
        (container) exists. A local path needs nothing: a missing directory is created.

        Raises
        ------
        StorageError
            Saying which of these failed (never showing the credentials).
        """
        import pyarrow.fs as pafs

        if self.is_local:
            return
        bucket = self.path.split("/", 1)[0]
        try:
            info = self.fs.get_file_info(bucket)
        except OSError as e:
            raise self._fail("reach", e) from e
        if info.type == pafs.FileType.NotFound:
            raise StorageError(
                f"cannot reach {self.url}: the bucket (container) {bucket!r} does not exist or "
                f"is not visible with these credentials; create it, or fix the path or the "
                f"storage options"
            )

    def exists(self) -> bool:
        """True when a file (object) or directory exists here."""
        import pyarrow.fs as pafs

        return bool(self.info().type != pafs.FileType.NotFound)

    def is_dir(self) -> bool:
        """True for a directory (on object stores: a prefix with objects below it)."""
        import pyarrow.fs as pafs

        return bool(self.info().type == pafs.FileType.Directory)

    def read_bytes(self) -> bytes | None:
        """The whole file, or None when it is not there (at the open, or gone by the read).

        Raises
        ------
        StorageError
            When the file is there but cannot be read.
        """
        try:
            stream = self.fs.open_input_stream(self.path)
        except OSError as e:
            if not_found(e):
                return None
            raise self._fail("open", e) from e
        try:
            with self._reading(), stream:
                return bytes(stream.read())
        except StorageNotFoundError:
            return None

    def open_input(self) -> InputFile:
        """A random-access reader of the file (caller closes it); every read translates errors.

        Raises
        ------
        StorageNotFoundError
            When the file is not there. On an object store the same error can come from any
            later read: the object was deleted after the open.
        StorageError
            When it cannot be opened for another reason.
        """
        try:
            return InputFile(self._reading, self.fs.open_input_file(self.path))
        except OSError as e:
            raise self._fail("open", e) from e

    def read_parquet(
        self,
        columns: Sequence[str] | None = None,
        *,
        missing_columns: Literal["fail", "skip"] = "fail",
        rows: Sequence[int] | None = None,
    ) -> pa.Table:
        """The rows of a Parquet file, all columns or ``columns`` (footer read once).

        ``missing_columns="skip"`` reads those of ``columns`` the file has (optional columns);
        ``"fail"`` lets pyarrow refuse a column the file lacks. ``rows``: only the rows at these
        0-based positions, in their order, reading only the row groups that hold them. Read with
        pyarrow's own reader of the store (no copy through Python).

        Raises
        ------
        StorageNotFoundError
            When the file is not there, at the open or at any read (deleted meanwhile).
        StorageError
            When it cannot be read for another reason.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            handle = self.fs.open_input_file(self.path)
        except OSError as e:
            raise self._fail("open", e) from e
        with self._reading(), handle:
            parquet = pq.ParquetFile(handle)
            wanted = None if columns is None else list(columns)
            if wanted is not None and missing_columns == "skip":
                names = set(parquet.schema_arrow.names)
                wanted = [c for c in wanted if c in names]
            if rows is None:
                return parquet.read(columns=wanted)
            sizes = [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)]
            groups, at = row_group_positions(sizes, rows)
            return parquet.read_row_groups(groups, columns=wanted).take(pa.array(at, pa.int64()))

    def list(self, *, recursive: bool = False) -> list[Entry]:
        """Files below this location (names relative to it); [] when it does not exist."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self.path, allow_not_found=True, recursive=recursive)
        try:
            infos = self.fs.get_file_info(selector)
        except OSError as e:
            if not_found(e):
                return []
            raise self._fail("list", e) from e
        base = self.path.rstrip("/") + "/"
        entries = [
            Entry(
                info.path[len(base) :] if info.path.startswith(base) else info.base_name,
                info.size or 0,
                info.mtime_ns or 0,
            )
            for info in infos
            if info.type == pafs.FileType.File
        ]
        return sorted(entries, key=lambda e: e.name)

    # -- writing -------------------------------------------------------------------------

    def write_bytes(self, data: bytes) -> None:
        """Replace the file with ``data``: readers see the old or the new bytes, never a part.

        On an object store one PUT (atomic). Locally a temporary file in the same directory,
        fsynced and renamed over the target, so the bytes survive a crash once this returns.
        """
        if self.is_local:
            write_local_atomically(self.path, data)
            return
        try:
            with self.fs.open_output_stream(self.path) as stream:
                stream.write(data)
        except OSError as e:
            raise self._fail("write", e) from e

    def create_bytes(self, data: bytes) -> bool:
        """Create the file holding ``data`` only if it is not there; False when it was.

        The primitive a Delta commit needs ("Writers MUST never overwrite an existing log
        entry"): of writers racing for one name, exactly one creates it. Locally a complete
        temporary file hard-linked to the name (atomic, durable once this returns); on S3 one
        PUT with ``If-None-Match: *``, which pyarrow's client cannot send, through obstore.

        Raises
        ------
        StorageError
            When the store refuses the write, and on stores other than local disks and S3 (no
            create-if-absent is wired for them yet).
        """
        if self.creates_exclusively:
            try:
                if self.is_local:
                    return create_local_exclusively(self.path, data)
                return create_s3_object_exclusively(self.path, self.delta_options(), data)
            except StorageError:
                raise
            except Exception as e:  # obstore's errors are not OSErrors
                raise self._fail("create", e) from e
        raise StorageError(
            f"cannot create {self.url} only if absent: spark-ckpt has no conditional write "
            f"for {self.scheme} yet (local disks and S3 only). Commits written by spark-ckpt "
            f"itself (deletion vectors) need one"
        )

    def open_output(self) -> BinaryIO:
        """A writer of a new file (caller closes it).

        On an object store the object appears whole when the writer is closed (a multipart
        upload). A local file is fsynced when closed, so it survives a crash once closed.
        """
        try:
            if self.is_local:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                return SyncedFile(self.path, "wb")
            return cast(BinaryIO, self.fs.open_output_stream(self.path))
        except OSError as e:
            raise self._fail("create", e) from e

    def copy_to(self, target: Location) -> int | None:
        """Copy this file to ``target`` (any store to any store); its size, None when missing.

        Small files are copied whole (:meth:`write_bytes`: the target appears atomically);
        larger ones are streamed in chunks of :data:`COPY_CHUNK` bytes, never held in memory.
        Missing also means deleted during the copy (an object store does not hold an opened
        file); a copy that fails part way deletes the part of the target it wrote.
        """
        import pyarrow.fs as pafs

        info = self.info()
        if info.type != pafs.FileType.File or info.size is None:
            return None
        size = info.size
        if size <= COPY_CHUNK:
            data = self.read_bytes()
            if data is None:
                return None
            target.write_bytes(data)
            return len(data)
        copied = 0
        try:
            with target.open_output() as sink:
                for chunk in iter_chunks(self, 0, size, COPY_CHUNK):
                    sink.write(chunk)
                    copied += len(chunk)
        except BaseException as e:
            with contextlib.suppress(OSError):
                target.delete()  # closing the sink made what it had a whole object
            if isinstance(e, StorageNotFoundError) and not self.exists():
                return None  # this file is gone (not the target's bucket)
            raise
        return copied

    def delete(self) -> bool:
        """Delete the file; False when it was not there."""
        try:
            self.fs.delete_file(self.path)
        except FileNotFoundError:
            return False
        except OSError as e:
            if not_found(e):
                return False
            raise self._fail("delete", e) from e
        return True

    def delete_tree(self) -> None:
        """Delete the directory (prefix) and everything below it, if present."""
        with contextlib.suppress(FileNotFoundError):
            try:
                self.fs.delete_dir(self.path)
            except OSError as e:
                if not not_found(e):
                    raise self._fail("delete", e) from e

    def make_dirs(self) -> None:
        """Create the directory locally (object stores have none to create)."""
        if self.is_local:
            os.makedirs(self.path, exist_ok=True)


def iter_chunks(location: Location, start: int, stop: int, chunk: int) -> Iterator[bytes]:
    """Bytes ``[start, stop)`` of a file, in pieces of at most ``chunk`` (a random-access read).

    Raises
    ------
    StorageNotFoundError
        When the file is not there, at the open or at any read (deleted meanwhile).
    StorageError
        When it cannot be read for another reason.
    """
    with location.open_input() as handle:
        handle.seek(start)
        remaining = stop - start
        while remaining > 0:
            data = handle.read(min(chunk, remaining))
            if not data:
                return
            remaining -= len(data)
            yield data
