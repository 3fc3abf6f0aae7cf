"""Deletion vectors without a JVM: Z85, the bitmap bytes, DV files and descriptors.

Known answers come from the Delta protocol's examples and delta-kernel-rs's tests
(``kernel/src/actions/deletion_vector.rs``); everything else round-trips through the reader.
"""

from __future__ import annotations

import pickle
import struct
import uuid
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_ckpt.errors import StateFormatError, StorageNotFoundError, UsageError
from spark_ckpt.sinks.mirror.deletion_vectors import (
    MAGIC_NUMBER,
    DeletedRows,
    DeletionVectorDescriptor,
    dv_file_bytes,
    merge_deletions,
    read_deletion_vector,
    read_deletion_vectors,
    write_deletion_vectors,
    z85_decode,
    z85_encode,
)
from spark_ckpt.state.storage import Location

# delta-kernel-rs's inline DV of rows 3, 4, 7, 11, 18, 29 (44 bytes, portable format).
KERNEL_INLINE = "^Bg9^0rr910000000000iXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"
KERNEL_INLINE_ROWS = [3, 4, 7, 11, 18, 29]


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        # PROTOCOL.md, "JSON Example 1": prefix "ab", then the UUID.
        ("^-aqEH.-t@S}K{vb[*k^", "d2c639aa-8816-431a-aaf6-d3fe2512ff61"),
        # delta-kernel-rs: the DV of its table-with-dv-small test table.
        ("vBn[lx{q8@P<9BNH/isA", "61d16c75-6994-46b7-a15b-8b538852e50e"),
        # delta-kernel-rs: encoded_relative_path of known UUIDs.
        ("rsTVZ&*Sl-RXRWjryu/!", "550e8400-e29b-41d4-a716-446655440000"),
        ("5<w-%>:JjlQ/G/]6C<1m", "123e4567-e89b-12d3-a456-426614174000"),
    ],
)
def test_z85_uuids_match_the_protocol_and_kernel_examples(encoded: str, expected: str) -> None:
    """A UUID's 16 bytes (big endian) in Z85 are the 20 characters Delta writes."""
    assert str(uuid.UUID(bytes=z85_decode(encoded))) == expected
    assert z85_encode(uuid.UUID(expected).bytes) == encoded


def test_z85_matches_the_zeromq_rfc_example() -> None:
    """ZeroMQ RFC 32's test vector: 0x86 4F D2 6F B5 59 F7 5B is "HelloWorld"."""
    data = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85_encode(data) == "HelloWorld"
    assert z85_decode("HelloWorld") == data


@given(st.binary(max_size=64))
def test_z85_round_trips_any_bytes_padded_to_four(data: bytes) -> None:
    """Delta pads to a multiple of 4; the size given back cuts the padding off."""
    assert z85_decode(z85_encode(data), len(data)) == data


@pytest.mark.parametrize(
    ("text", "fault"),
    [("abcd", "not a multiple of 5"), ("abcd~", "not a Z85 character"), ("#####", r"2\*\*32")],
)
def test_z85_refuses_text_that_is_not_z85(text: str, fault: str) -> None:
    """Bad Z85 in a log entry is a StateFormatError that says what is wrong."""
    with pytest.raises(StateFormatError, match=fault):
        z85_decode(text)


def test_bitmap_bytes_equal_the_kernel_inline_vector() -> None:
    """Rows 3, 4, 7, 11, 18, 29 serialize to delta-kernel-rs's inline DV byte for byte."""
    expected = z85_decode(KERNEL_INLINE, 44)
    assert DeletedRows.from_indexes(KERNEL_INLINE_ROWS).serialize() == expected
    assert struct.unpack_from("<I", expected)[0] == MAGIC_NUMBER


def test_kernel_inline_descriptor_reads_its_rows(tmp_path: Path) -> None:
    """An inline descriptor from delta-kernel-rs's tests reads back rows 3, 4, 7, 11, 18, 29."""
    descriptor = DeletionVectorDescriptor("i", KERNEL_INLINE, 44, 6)
    rows = read_deletion_vector(Location(str(tmp_path)), descriptor)
    assert list(rows) == KERNEL_INLINE_ROWS
    assert DeletionVectorDescriptor.inline(rows) == descriptor


@given(
    st.lists(
        st.one_of(
            st.integers(0, 70_000),  # one bucket, array and bitmap containers
            st.integers(0, (1 << 63) - 1),  # any bucket (Parquet files are never that long)
        ),
        max_size=300,
    ),
    st.lists(st.tuples(st.integers(0, 200_000), st.integers(1, 5000)), max_size=3),
)
def test_bitmap_round_trips(singles: list[int], runs: list[tuple[int, int]]) -> None:
    """Any set of rows, runs included (run containers), reads back equal from its bytes."""
    indexes = singles + [i for start, length in runs for i in range(start, start + length)]
    rows = DeletedRows.from_indexes(indexes)
    back = DeletedRows.deserialize(rows.serialize())
    assert back == rows
    assert list(back) == sorted(set(indexes))
    assert len(back) == len(set(indexes))
    assert back.indexes().tolist() == sorted(set(indexes))


def test_a_run_of_rows_is_stored_as_a_run() -> None:
    """A million consecutive rows take one run per 64K container: bytes, not megabytes."""
    assert len(DeletedRows.from_indexes(np.arange(1_000_000)).serialize()) < 300


def test_rows_union_and_membership() -> None:
    """Union keeps rows of both sets; membership tests positions of any bucket."""
    big = (5 << 32) + 7
    union = DeletedRows.from_indexes([1, 2, big]).union(DeletedRows.from_indexes([2, 3]))
    assert list(union) == [1, 2, 3, big]
    assert big in union
    assert 4 not in union
    assert -1 not in union
    assert pickle.loads(pickle.dumps(union)) == union


@pytest.mark.parametrize(
    ("indexes", "fault"),
    [([-1], "0-based"), ([1 << 63], "2\\*\\*63"), (np.array([0.5]), "integers")],
)
def test_rows_refuse_positions_no_file_has(indexes: object, fault: str) -> None:
    """Negative, too large or non-integer positions are a UsageError naming the value."""
    with pytest.raises(UsageError, match=fault):
        DeletedRows.from_indexes(indexes)  # type: ignore[arg-type]


def test_bytes_without_the_magic_number_are_refused() -> None:
    """Delta's older native format (another magic number) is not silently misread."""
    data = bytearray(DeletedRows.from_indexes([1]).serialize())
    data[:4] = struct.pack("<I", MAGIC_NUMBER - 1)
    with pytest.raises(StateFormatError, match="magic number"):
        DeletedRows.deserialize(bytes(data))


def test_file_layout_is_version_size_bytes_checksum() -> None:
    """Version 1, then per DV: big-endian size, bitmap bytes, big-endian CRC-32 of them."""
    first, second = DeletedRows.from_indexes([0, 9]), DeletedRows.from_indexes([5, 15, 25])
    data, places = dv_file_bytes([first, second])
    assert data[0] == 1
    (offset, size), (offset2, size2) = places
    assert offset == 1
    assert struct.unpack_from(">I", data, offset)[0] == size
    body = data[offset + 4 : offset + 4 + size]
    assert body == first.serialize()
    assert struct.unpack_from(">I", data, offset + 4 + size)[0] == zlib.crc32(body)
    assert offset2 == offset + 8 + size
    assert len(data) == offset2 + 8 + size2


def test_written_file_reads_back_per_descriptor(tmp_path: Path) -> None:
    """Several DVs in one file: each descriptor reads its own rows; names follow the protocol."""
    table = Location(str(tmp_path / "t"))
    sets = [DeletedRows.from_indexes(range(i, 1000, 7 + i)) for i in range(3)]
    dv_id = uuid.UUID("d2c639aa-8816-431a-aaf6-d3fe2512ff61")
    descriptors = write_deletion_vectors(table, sets, random_prefix="ab", dv_id=dv_id)
    assert descriptors[0].path_or_inline_dv == "ab^-aqEH.-t@S}K{vb[*k^"
    assert (tmp_path / "t" / "ab" / f"deletion_vector_{dv_id}.bin").is_file()
    assert len({d.unique_id for d in descriptors}) == 3
    for rows, descriptor in zip(sets, descriptors, strict=True):
        assert descriptor.cardinality == len(rows)
        assert read_deletion_vector(table, descriptor) == rows
        assert DeletionVectorDescriptor.from_json(descriptor.to_json()) == descriptor


def test_many_descriptors_read_together_each_get_their_rows(tmp_path: Path) -> None:
    """Two DV files and an inline DV in one call: each file opened once, every DV checked."""
    table = Location(str(tmp_path / "t"))
    first = [DeletedRows.from_indexes(range(i, 500, 3 + i)) for i in range(3)]
    second = [DeletedRows.from_indexes([7, 9])]
    descriptors = [
        *write_deletion_vectors(table, first),
        *write_deletion_vectors(table, second),
        DeletionVectorDescriptor.inline(DeletedRows.from_indexes([4])),
    ]
    found = read_deletion_vectors(table, descriptors)
    assert [found[d.unique_id] for d in descriptors] == [
        *first,
        *second,
        DeletedRows.from_indexes([4]),
    ]
    assert read_deletion_vectors(table, []) == {}
    file = descriptors[1].file(table)
    assert file is not None
    data = bytearray(file.read_bytes() or b"")
    data[(descriptors[1].offset or 0) + 6] ^= 1  # in the second DV's bitmap
    file.write_bytes(bytes(data))
    with pytest.raises(StateFormatError, match=rf"at byte {descriptors[1].offset} of .*CRC-32"):
        read_deletion_vectors(table, descriptors)


def test_merge_is_the_union_with_the_files_current_dv(tmp_path: Path) -> None:
    """A file that has a DV gets old | new; one without gets the new rows alone."""
    table = Location(str(tmp_path))
    (old,) = write_deletion_vectors(table, [DeletedRows.from_indexes([1, 5])])
    more = DeletedRows.from_indexes([5, 8])
    assert list(merge_deletions(table, old, more)) == [1, 5, 8]
    assert merge_deletions(table, None, more) is more


def test_a_damaged_file_fails_its_checksum(tmp_path: Path) -> None:
    """A flipped bit in the bitmap is a StateFormatError naming the file and the offset."""
    table = Location(str(tmp_path))
    (descriptor,) = write_deletion_vectors(table, [DeletedRows.from_indexes([1, 2, 3])])
    file = descriptor.file(table)
    assert file is not None
    data = bytearray(file.read_bytes() or b"")
    data[-6] ^= 1
    file.write_bytes(bytes(data))
    with pytest.raises(StateFormatError, match=r"at byte 1 of .*CRC-32"):
        read_deletion_vector(table, descriptor)


def test_a_size_that_disagrees_with_the_log_is_refused(tmp_path: Path) -> None:
    """The log's sizeInBytes must be the file's: a wrong descriptor is not read past its DV."""
    table = Location(str(tmp_path))
    (descriptor,) = write_deletion_vectors(table, [DeletedRows.from_indexes([1, 2, 3])])
    wrong = DeletionVectorDescriptor("u", descriptor.path_or_inline_dv, 4, 3, 1)
    with pytest.raises(StateFormatError, match="the log says 4"):
        read_deletion_vector(table, wrong)


def test_a_missing_file_is_storage_not_found(tmp_path: Path) -> None:
    """A descriptor whose file is gone raises StorageNotFoundError (not a format error)."""
    descriptor = DeletionVectorDescriptor("u", z85_encode(uuid.uuid4().bytes), 20, 1, 1)
    with pytest.raises(StorageNotFoundError):
        read_deletion_vector(Location(str(tmp_path)), descriptor)


@pytest.mark.parametrize(
    ("fields", "fault"),
    [
        ({"storageType": "x"}, "not one of u, i, p"),
        ({"pathOrInlineDv": "short"}, "shorter than a Z85 UUID"),
        ({"storageType": "i", "pathOrInlineDv": "00000"}, "no offset"),
        ({"sizeInBytes": None}, "not a deletion vector descriptor"),
    ],
)
def test_bad_descriptors_are_refused(fields: dict[str, object], fault: str) -> None:
    """A log entry's deletionVector that breaks the schema is a StateFormatError."""
    good = {
        "storageType": "u",
        "pathOrInlineDv": "vBn[lx{q8@P<9BNH/isA",
        "offset": 1,
        "sizeInBytes": 36,
        "cardinality": 2,
    }
    with pytest.raises(StateFormatError, match=fault):
        DeletionVectorDescriptor.from_json({**good, **fields})


def test_writing_nothing_is_a_usage_error(tmp_path: Path) -> None:
    """No vectors, an empty one, or a prefix with a slash are refused before any write."""
    table = Location(str(tmp_path))
    with pytest.raises(UsageError):
        write_deletion_vectors(table, [])
    with pytest.raises(UsageError):
        write_deletion_vectors(table, [DeletedRows()])
    with pytest.raises(UsageError, match="prefix"):
        write_deletion_vectors(table, [DeletedRows.from_indexes([1])], random_prefix="a/b")
    assert not list(tmp_path.iterdir())
