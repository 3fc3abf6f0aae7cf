"""Deletion vectors as the Delta protocol defines them: the bytes, the descriptor, the files.

A deletion vector (DV) marks rows of one Parquet data file as deleted without rewriting the file:
a set of 0-based row positions in the file. The protocol (delta-io/delta ``PROTOCOL.md``) defines
every byte this module writes and reads:

- "Deletion Vectors" and "Deletion Vector Descriptor Schema": the ``deletionVector`` struct of an
  ``add``/``remove`` action (``storageType`` ``u``/``i``/``p``, ``pathOrInlineDv``, ``offset``,
  ``sizeInBytes``, ``cardinality``) and, under "Derived Fields", ``uniqueId``
  (``<storageType><pathOrInlineDv>[@<offset>]``) and the file of a ``u`` DV:
  ``<table>/<random prefix>/deletion_vector_<uuid>.bin``, where ``pathOrInlineDv`` is the prefix
  followed by the UUID's 16 bytes in Z85 (20 characters). "The concrete Base85 variant used is
  Z85" (ZeroMQ RFC 32).
- Appendix "Deletion Vector Format": a DV's bytes are the ``RoaringBitmapArray`` serialization,
  the magic number 1681511377 (little endian) and a 64-bit roaring bitmap in the portable format
  of the RoaringFormatSpec's 64-bit extension: the number of 32-bit buckets (8 bytes, little
  endian), then per bucket in ascending order its key (the high 32 bits, 4 bytes little endian,
  most significant bit 0) and a portable 32-bit roaring bitmap of the low 32 bits.
- Appendix "Deletion Vector File Storage Format": a DV file is one version byte (1), then per DV
  its size (4 bytes, big endian; it counts the magic number and the bitmap), the bytes, and a
  CRC-32 of them (4 bytes, big endian). A descriptor's ``offset`` is where its size field starts
  (1 for the first DV of a file) and its ``sizeInBytes`` is that size.
- "Reader Requirements for Deletion Vectors": rows in a DV must not be returned; "Writer
  Requirement for Deletion Vectors": an ``add`` with a DV carries an exact ``stats.numRecords``
  (of the whole data file, deleted rows included).
- "Add File and Remove File" and "Action Reconciliation": a logical file is ``(path, DV
  uniqueId)``; replacing a file's DV is one commit holding a ``remove`` of the path with its old
  DV and an ``add`` of the same path with the new one.

The 32-bit bitmaps are pyroaring's (CRoaring), whose portable serialization is the standard one
that delta-spark (Java RoaringBitmap) and delta-rs (the ``roaring`` crate) read; this module only
frames them. delta-kernel-rs (``kernel/src/actions/deletion_vector.rs`` and
``deletion_vector_writer.rs``) reads and writes the same layout; its tests' vectors are this
module's known answers.

Pure Python over pyroaring and the storage layer (no Spark): runs on the driver or an executor.
"""

from __future__ import annotations

import array
import struct
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pyroaring import BitMap

from spark_ckpt.errors import StateFormatError, UsageError
from spark_ckpt.state.storage import Location

from ..staging import staged_location

__all__ = [
    "FILE_FORMAT_VERSION",
    "MAGIC_NUMBER",
    "DeletedRows",
    "DeletionVectorDescriptor",
    "live_rows",
    "merge_deletions",
    "read_deletion_vector",
    "read_deletion_vectors",
    "write_deletion_vectors",
    "z85_decode",
    "z85_encode",
]

MAGIC_NUMBER = 1681511377
"""The ``RoaringBitmapArray`` portable format's magic number ("Deletion Vector Format")."""

FILE_FORMAT_VERSION = 1
"""The first byte of a DV file ("Deletion Vector File Storage Format")."""

_UUID_CHARS = 20  # 16 bytes in Z85
_MAX_ROW = (1 << 63) - 1  # keys' most significant bit must be 0 (Java reads them signed)
_MAX_SIZE = (1 << 31) - 1  # sizes and offsets are Java ints

# -- Z85 ----------------------------------------------------------------------------------------

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(_Z85)}


def z85_encode(data: bytes) -> str:
    """``data`` in Z85 (ZeroMQ RFC 32), zero-padded to a multiple of 4 bytes as Delta does.

    Runs wherever a descriptor is made; 5 characters per 4 bytes.
    """
    padded = data + b"\0" * (-len(data) % 4)
    out = []
    for (word,) in struct.iter_unpack(">I", padded):
        chars = []
        for _ in range(5):
            word, digit = divmod(word, 85)
            chars.append(_Z85[digit])
        out.append("".join(reversed(chars)))
    return "".join(out)


def z85_decode(text: str, size: int | None = None) -> bytes:
    """The bytes of Z85 ``text``, cut to ``size`` bytes when given (Delta pads to 4).

    Raises
    ------
    StateFormatError
        When ``text`` is not Z85: a length that is not a multiple of 5, a character outside the
        alphabet, a group above 2**32 - 1, or fewer bytes than ``size``.
    """
    if len(text) % 5:
        raise StateFormatError(
            f"Z85 text {text!r} has {len(text)} characters, not a multiple of 5: it is not a "
            f"Delta deletion vector's Z85 (check the log entry's pathOrInlineDv)"
        )
    out = bytearray()
    for start in range(0, len(text), 5):
        word = 0
        for char in text[start : start + 5]:
            digit = _Z85_VALUE.get(char)
            if digit is None:
                raise StateFormatError(
                    f"Z85 text {text!r} holds {char!r}, which is not a Z85 character"
                )
            word = word * 85 + digit
        if word > 0xFFFFFFFF:
            raise StateFormatError(f"Z85 text {text!r} holds a group above 2**32 - 1")
        out += word.to_bytes(4, "big")
    if size is not None:
        if size > len(out):
            raise StateFormatError(
                f"Z85 text {text!r} holds {len(out)} bytes, fewer than the {size} expected"
            )
        del out[size:]
    return bytes(out)


# -- the set of deleted rows --------------------------------------------------------------------


class DeletedRows:
    """An immutable set of deleted row positions (0-based, in one Parquet file).

    Held as Delta's ``RoaringBitmapArray`` is: one 32-bit pyroaring bitmap per distinct high 32
    bits ("bucket"). Picklable (crosses from executors to the driver as its serialization).

    Parameters
    ----------
    buckets
        Key (high 32 bits) to the bitmap of low 32 bits; empty bitmaps are dropped. The bitmaps
        are copied, so the caller may keep changing its own.
    """

    __slots__ = ("_buckets",)

    def __init__(self, buckets: Mapping[int, BitMap] | None = None) -> None:
        self._buckets: dict[int, BitMap] = {
            key: BitMap(bits) for key, bits in sorted((buckets or {}).items()) if bits
        }

    @classmethod
    def from_indexes(cls, indexes: Iterable[int] | np.ndarray) -> DeletedRows:
        """The set of ``indexes`` (any order, repeats allowed).

        Runs on the driver or an executor, once per data file with deletions.

        Raises
        ------
        UsageError
            For a negative index or one at or past 2**63 (no Parquet file has that many rows).
        """
        values = np.asarray(indexes if isinstance(indexes, np.ndarray) else list(indexes))
        if values.size == 0:
            return cls()
        if values.dtype.kind not in "iu":
            raise UsageError(f"row indexes must be integers, got an array of {values.dtype}")
        if values.dtype.kind == "i" and int(values.min()) < 0:
            raise UsageError(f"row indexes are 0-based positions, got {int(values.min())}")
        if int(values.max()) > _MAX_ROW:
            raise UsageError(f"row index {int(values.max())} is at or past 2**63")
        rows = values.astype(np.uint64, copy=False)
        high = rows >> np.uint64(32)
        buckets: dict[int, BitMap] = {}
        for key in np.unique(high):
            low = array.array("I")
            # pyroaring takes an array.array in one call; a numpy array it iterates.
            low.frombytes((rows[high == key] & np.uint64(0xFFFFFFFF)).astype(np.uint32).tobytes())
            buckets[int(key)] = BitMap(low)
        return cls(buckets)

    def union(self, other: DeletedRows) -> DeletedRows:
        """Rows in either set (a file's DV after more deletions: old | new)."""
        buckets = dict(self._buckets)
        for key, bits in other._buckets.items():
            buckets[key] = buckets[key] | bits if key in buckets else bits
        return DeletedRows(buckets)

    def __len__(self) -> int:
        return sum(len(bits) for bits in self._buckets.values())

    def __bool__(self) -> bool:
        return bool(self._buckets)

    def __contains__(self, row: object) -> bool:
        if not isinstance(row, int) or row < 0:
            return False
        bits = self._buckets.get(row >> 32)
        return bits is not None and (row & 0xFFFFFFFF) in bits

    def __iter__(self) -> Iterator[int]:
        for key, bits in self._buckets.items():
            base = key << 32
            for low in bits:
                yield base | low

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeletedRows):
            return NotImplemented
        return self._buckets == other._buckets

    def __hash__(self) -> int:
        return hash(self.serialize())

    def __repr__(self) -> str:
        return f"DeletedRows({len(self)} rows)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (DeletedRows.deserialize, (self.serialize(),))

    def indexes(self) -> np.ndarray:
        """The rows in ascending order, as a ``uint64`` array."""
        parts = [
            np.frombuffer(bits.to_array(), dtype=np.uint32).astype(np.uint64) | np.uint64(key << 32)
            for key, bits in self._buckets.items()
        ]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)

    def serialize(self) -> bytes:
        """The ``RoaringBitmapArray`` bytes: magic number, then the portable 64-bit bitmap.

        Each 32-bit bitmap is run-optimized first (runs of consecutive deleted rows, the common
        case of a rewritten range, take 4 bytes a run instead of 2 a row); readers take any
        container kind.
        """
        parts = [struct.pack("<Iq", MAGIC_NUMBER, len(self._buckets))]
        for key, bits in self._buckets.items():
            optimized = BitMap(bits)
            optimized.run_optimize()
            parts.append(struct.pack("<I", key))
            parts.append(optimized.serialize())
        return b"".join(parts)

    @classmethod
    def deserialize(cls, data: bytes, where: str = "a deletion vector") -> DeletedRows:
        """The set that :meth:`serialize` (or delta-spark, delta-rs) wrote.

        Raises
        ------
        StateFormatError
            When ``data`` does not start with the magic number, is cut short, or holds a bitmap
            pyroaring cannot read; the message names ``where``.
        """
        if len(data) < 12:
            raise StateFormatError(f"{where} holds {len(data)} bytes, too few for a bitmap")
        magic, count = struct.unpack_from("<Iq", data)
        if magic != MAGIC_NUMBER:
            raise StateFormatError(
                f"{where} starts with {magic}, not the magic number {MAGIC_NUMBER} of Delta's "
                f"portable RoaringBitmapArray format"
            )
        position = 12
        buckets: dict[int, BitMap] = {}
        for _ in range(count):
            if position + 4 > len(data):
                raise StateFormatError(f"{where} is cut short after {len(buckets)} bucket(s)")
            (key,) = struct.unpack_from("<I", data, position)
            try:
                bits = BitMap.deserialize(data[position + 4 :])
            except (ValueError, OverflowError) as e:
                raise StateFormatError(f"{where}: bucket {key} is not a roaring bitmap: {e}") from e
            buckets[key] = bits
            position += 4 + _serialized_size(bits)
        if position != len(data):
            raise StateFormatError(
                f"{where} holds {len(data) - position} byte(s) after its {count} bucket(s)"
            )
        return cls(buckets)


def _serialized_size(bits: BitMap) -> int:
    """How many bytes ``bits`` took in its portable serialization (as read, not re-optimized)."""
    return len(bits.serialize())


# -- descriptors ----------------------------------------------------------------------------------

StorageType = Literal["u", "i", "p"]
_STORAGE_TYPES: tuple[StorageType, ...] = ("u", "i", "p")


@dataclass(frozen=True)
class DeletionVectorDescriptor:
    """The ``deletionVector`` struct of an ``add`` or ``remove`` action.

    Attributes
    ----------
    storage_type
        ``u``: a file under the table named from a UUID; ``i``: inline in the log; ``p``: a file
        at an absolute path.
    path_or_inline_dv
        ``u``: an optional random prefix and the UUID in Z85; ``i``: the bytes in Z85; ``p``: the
        path.
    size_in_bytes
        The DV's bytes (magic number and bitmap; before Z85 if inline).
    cardinality
        How many rows it deletes.
    offset
        Where the DV's size field starts in its file; None when inline.

    Raises
    ------
    StateFormatError
        For a storage type other than ``u``, ``i``, ``p``, a ``u`` path shorter than a UUID, an
        inline DV with an offset, or negative sizes.
    """

    storage_type: StorageType
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    def __post_init__(self) -> None:
        if self.storage_type not in _STORAGE_TYPES:
            raise StateFormatError(
                f"deletion vector storageType {self.storage_type!r} is not one of u, i, p"
            )
        if self.storage_type == "u" and len(self.path_or_inline_dv) < _UUID_CHARS:
            raise StateFormatError(
                f"deletion vector pathOrInlineDv {self.path_or_inline_dv!r} is shorter than a "
                f"Z85 UUID ({_UUID_CHARS} characters)"
            )
        if self.storage_type == "i" and self.offset is not None:
            raise StateFormatError("an inline deletion vector has no offset")
        if self.size_in_bytes < 0 or self.cardinality < 0 or (self.offset or 0) < 0:
            raise StateFormatError(f"deletion vector {self} has a negative size or offset")

    @property
    def unique_id(self) -> str:
        """``<storageType><pathOrInlineDv>[@<offset>]`` (the logical file's key with the path)."""
        base = f"{self.storage_type}{self.path_or_inline_dv}"
        return base if self.offset is None else f"{base}@{self.offset}"

    def file(self, table: Location) -> Location | None:
        """The DV file of this descriptor for the table at ``table`` (None when inline)."""
        if self.storage_type == "i":
            return None
        if self.storage_type == "p":
            return Location(self.path_or_inline_dv, table.options)
        prefix = self.path_or_inline_dv[:-_UUID_CHARS]
        name = dv_file_name(uuid.UUID(bytes=z85_decode(self.path_or_inline_dv[-_UUID_CHARS:], 16)))
        return table.child(prefix, name) if prefix else table.child(name)

    def to_json(self) -> dict[str, Any]:
        """The struct as it stands in a Delta log entry (``offset`` absent when None)."""
        out: dict[str, Any] = {
            "storageType": self.storage_type,
            "pathOrInlineDv": self.path_or_inline_dv,
        }
        if self.offset is not None:
            out["offset"] = self.offset
        out["sizeInBytes"] = self.size_in_bytes
        out["cardinality"] = self.cardinality
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> DeletionVectorDescriptor:
        """The descriptor of a log entry's ``deletionVector`` struct.

        Raises
        ------
        StateFormatError
            When a required field is missing or has the wrong type.
        """
        try:
            storage_type = value["storageType"]
            path = value["pathOrInlineDv"]
            size, cardinality = int(value["sizeInBytes"]), int(value["cardinality"])
            offset = None if value.get("offset") is None else int(value["offset"])
        except (KeyError, TypeError, ValueError) as e:
            raise StateFormatError(f"not a deletion vector descriptor: {dict(value)!r}") from e
        if not isinstance(path, str):
            raise StateFormatError(f"not a deletion vector descriptor: {dict(value)!r}")
        return cls(storage_type, path, size, cardinality, offset)

    @classmethod
    def inline(cls, rows: DeletedRows) -> DeletionVectorDescriptor:
        """A descriptor holding ``rows`` in the log itself (storage type ``i``)."""
        data = rows.serialize()
        return cls("i", z85_encode(data), len(data), len(rows))


def dv_file_name(dv_id: uuid.UUID) -> str:
    """``deletion_vector_<uuid>.bin``, the name of a ``u`` DV file ("Derived Fields")."""
    return f"deletion_vector_{dv_id}.bin"


# -- files --------------------------------------------------------------------------------------


def dv_file_bytes(vectors: Sequence[DeletedRows]) -> tuple[bytes, list[tuple[int, int]]]:
    """A DV file holding ``vectors``, and each one's ``(offset, sizeInBytes)``.

    Raises
    ------
    UsageError
        When the file would pass 2**31 - 1 bytes (offsets are Java ints): split the vectors
        over several files.
    """
    parts = [bytes([FILE_FORMAT_VERSION])]
    places = []
    offset = 1
    for rows in vectors:
        data = rows.serialize()
        places.append((offset, len(data)))
        parts += [struct.pack(">I", len(data)), data, struct.pack(">I", zlib.crc32(data))]
        offset += 8 + len(data)
    if offset > _MAX_SIZE:
        raise UsageError(
            f"{len(vectors)} deletion vectors take {offset} bytes, more than one DV file may "
            f"hold ({_MAX_SIZE}): write them in several files"
        )
    return b"".join(parts), places


def write_deletion_vectors(
    table: Location,
    vectors: Sequence[DeletedRows],
    *,
    random_prefix: str = "",
    dv_id: uuid.UUID | None = None,
) -> list[DeletionVectorDescriptor]:
    """Write ``vectors`` into one new DV file under ``table``; their descriptors, in order.

    Runs on the driver or an executor, once per batch and table (one file, one PUT, however
    many data files get a DV). The file's name is new (a random UUID), so the write never
    replaces anything; a file no commit refers to is garbage that VACUUM removes.

    Parameters
    ----------
    table
        The Delta table's root.
    vectors
        One set of deleted rows per data file (each the file's whole DV, old rows included).
    random_prefix
        A directory for the file below the table root (Delta's ``randomPrefixLength``
        characters, for object stores that shard by key prefix); empty: the root.
    dv_id
        The file's UUID (tests); a random one by default.

    Raises
    ------
    UsageError
        For no vectors, an empty one, or a prefix that is not plain letters and digits.
    StorageError
        When the file cannot be written.
    """
    if not vectors or not all(vectors):
        raise UsageError("write_deletion_vectors needs one or more non-empty sets of rows")
    if random_prefix and not random_prefix.isalnum():
        raise UsageError(f"a DV file's random prefix is letters and digits, got {random_prefix!r}")
    dv_id = dv_id or uuid.uuid4()
    data, places = dv_file_bytes(vectors)
    path = random_prefix + z85_encode(dv_id.bytes)
    descriptors = [
        DeletionVectorDescriptor("u", path, size, len(rows), offset)
        for rows, (offset, size) in zip(vectors, places, strict=True)
    ]
    target = descriptors[0].file(table)
    assert target is not None  # a "u" descriptor always has a file
    target.write_bytes(data)
    return descriptors


def read_deletion_vector(table: Location, descriptor: DeletionVectorDescriptor) -> DeletedRows:
    """The rows ``descriptor`` deletes, read from its file (or the log, when inline).

    Runs on the driver or an executor, once per data file whose DV is merged. Reads only the
    DV's bytes (a ranged read), checks the file's version byte, the size against the log's, the
    magic number and the CRC-32.

    Raises
    ------
    StorageNotFoundError
        When the DV file is not there.
    StateFormatError
        When its bytes are not the DV the log describes.
    """
    return read_deletion_vectors(table, [descriptor])[descriptor.unique_id]


def read_deletion_vectors(
    table: Location, descriptors: Sequence[DeletionVectorDescriptor]
) -> dict[str, DeletedRows]:
    """The rows each of ``descriptors`` deletes, by its :attr:`~DeletionVectorDescriptor.unique_id`.

    Runs on the driver, once per batch for the files whose DVs it merges: each DV file is opened
    once for all the DVs in it (a commit writes every DV it makes to one file), where opening it
    per DV took a third of a large table's apply. Checks each DV as :func:`read_deletion_vector`.

    Raises
    ------
    StorageNotFoundError
        When a DV file is not there.
    StateFormatError
        When bytes are not the DV the log describes.
    """
    found: dict[str, DeletedRows] = {}
    by_file: dict[str, tuple[Location, list[DeletionVectorDescriptor]]] = {}
    for descriptor in descriptors:
        if descriptor.storage_type == "i":
            rows = DeletedRows.deserialize(
                z85_decode(descriptor.path_or_inline_dv, descriptor.size_in_bytes),
                f"the inline deletion vector {descriptor.unique_id}",
            )
            found[descriptor.unique_id] = _checked(rows, descriptor, "the inline deletion vector")
            continue
        file = descriptor.file(table)
        assert file is not None  # a "u" or "p" descriptor always has a file
        by_file.setdefault(file.url, (file, []))[1].append(descriptor)
    for file, in_file in by_file.values():
        with file.open_input() as handle:
            version = handle.read(1)
            if version != bytes([FILE_FORMAT_VERSION]):
                raise StateFormatError(
                    f"{file.url} starts with {version!r}, not the DV file format version "
                    f"{FILE_FORMAT_VERSION}: it is not a Delta deletion vector file"
                )
            for descriptor in in_file:
                offset = 1 if descriptor.offset is None else descriptor.offset
                handle.seek(offset)
                framed = handle.read(8 + descriptor.size_in_bytes)
                where = f"the deletion vector at byte {offset} of {file.url}"
                found[descriptor.unique_id] = _framed(framed, descriptor, where)
    return found


def _framed(framed: bytes, descriptor: DeletionVectorDescriptor, where: str) -> DeletedRows:
    """One DV from its bytes in a DV file: size, bitmap, CRC-32, each checked."""
    if len(framed) != 8 + descriptor.size_in_bytes:
        raise StateFormatError(
            f"{where} is cut short: {len(framed)} bytes where the log says "
            f"{8 + descriptor.size_in_bytes} (size, {descriptor.size_in_bytes} bytes, checksum)"
        )
    (size,) = struct.unpack_from(">I", framed)
    if size != descriptor.size_in_bytes:
        raise StateFormatError(
            f"{where} holds {size} bytes, the log says {descriptor.size_in_bytes}"
        )
    data = framed[4 : 4 + size]
    (checksum,) = struct.unpack_from(">I", framed, 4 + size)
    if checksum != zlib.crc32(data):
        raise StateFormatError(
            f"{where} fails its CRC-32 check (stored {checksum}, computed {zlib.crc32(data)}): "
            f"the file is damaged"
        )
    return _checked(DeletedRows.deserialize(data, where), descriptor, where)


def _checked(rows: DeletedRows, descriptor: DeletionVectorDescriptor, where: str) -> DeletedRows:
    if len(rows) != descriptor.cardinality:
        raise StateFormatError(
            f"{where} deletes {len(rows)} rows, the log says {descriptor.cardinality}"
        )
    return rows


def merge_deletions(
    table: Location, existing: DeletionVectorDescriptor | None, deleted: DeletedRows
) -> DeletedRows:
    """A data file's DV after deleting ``deleted``: its current DV's rows | ``deleted``.

    Runs where the new DV is written, once per data file that already has a DV. The result
    replaces the old DV in the commit (``remove`` with the old descriptor, ``add`` with the new).
    """
    if existing is None:
        return deleted
    return read_deletion_vector(table, existing).union(deleted)


def live_rows(
    table: Location,
    path: str,
    descriptor: DeletionVectorDescriptor | None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """The rows of the data file ``path`` (as in the log) that ``descriptor`` does not delete.

    Runs on the driver (or an executor), once per data file read whole by a reader that must
    honour deletion vectors: a compaction, a rewrite after a schema change, a rebuild's copy.
    ``columns``: only those (all by default).
    """
    rows = staged_location(table, path).read_parquet(None if columns is None else list(columns))
    if descriptor is None:
        return rows
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[read_deletion_vector(table, descriptor).indexes().astype(np.int64)] = False
    return rows.filter(pa.array(keep))
