"""The mysql snapshot's pure parts: catalog columns, queried values, its manifest and spill."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from spark_ckpt.errors import TableCaptureError
from spark_ckpt.sources.mysql.binlog_offset import BinlogPosition
from spark_ckpt.sources.mysql.catalog import _column
from spark_ckpt.sources.mysql.snapshot import SnapshotManifest, SnapshotSpill
from spark_ckpt.sources.mysql.types import BINARY_CHARSET, FieldType, MySqlColumn, types_json
from spark_ckpt.sources.mysql.values import queried_values
from spark_ckpt.sources.schema import TYPES_COLUMN
from spark_ckpt.sources.snapshot_spill import SnapshotPartition, snapshot_partitions, snapshot_rows
from spark_ckpt.state.storage import Location


def _catalog(data_type: str, column_type: str, **given: object) -> MySqlColumn:
    """A catalog row (information_schema.COLUMNS) of column ``c`` described."""
    row: dict[str, object] = {
        "precision": None,
        "scale": None,
        "fsp": None,
        "charset": None,
        "octets": None,
        "key": "",
    } | given
    return _column("db.t", "c", data_type, column_type, *row.values())


def test_catalog_columns_take_the_type_codes_the_binlog_writes() -> None:
    assert _catalog("datetime", "datetime(6)", fsp=6).code == FieldType.DATETIME2
    assert _catalog("timestamp", "timestamp(3)", fsp=3).fsp == 3
    assert _catalog("time", "time", fsp=0).code == FieldType.TIME2
    assert _catalog("int", "int(11)", fsp=None).fsp == 0
    wide = _catalog("decimal", "decimal(50,10)", precision=50, scale=10)
    assert (wide.code, wide.precision, wide.scale) == (FieldType.NEWDECIMAL, 50, 10)
    assert _catalog("bigint", "bigint(20) unsigned").unsigned
    assert _catalog("year", "year(4)").unsigned, "a table map marks YEAR unsigned"
    assert _catalog("bit", "bit(10)", precision=10).bits == 10
    text = _catalog("longtext", "longtext", charset="utf8mb4", octets=4294967295)
    assert (text.code, text.charset, text.length) == (FieldType.BLOB, "utf8mb4", None)
    binary = _catalog("binary", "binary(4)", octets=4)
    assert (binary.code, binary.charset, binary.fixed_binary_length) == (
        FieldType.STRING,
        BINARY_CHARSET,
        4,
    )
    assert _catalog("varbinary", "varbinary(20)", octets=20).is_binary
    assert _catalog("int", "int(11)", key="PRI").primary


def test_enum_and_set_members_come_from_the_column_type_in_declared_order() -> None:
    column = _catalog("enum", "enum('small','it''s','a,b')", charset="utf8mb4")
    assert (column.code, column.members) == (FieldType.ENUM, ("small", "it's", "a,b"))
    assert _catalog("set", "set('d','a')").members == ("d", "a")


def test_a_type_the_binlog_path_does_not_know_is_refused_naming_the_column() -> None:
    with pytest.raises(TableCaptureError, match=r"'c' of table db\.t has type 'inet6'"):
        _catalog("inet6", "inet6")


def test_queried_values_equal_the_binlog_clients_for_json_and_zero_dates() -> None:
    columns = {
        "js": MySqlColumn("js", FieldType.JSON),
        "dt": MySqlColumn("dt", FieldType.DATE),
        "dtm": MySqlColumn("dtm", FieldType.DATETIME2, fsp=3),
        "d": MySqlColumn("d", FieldType.NEWDECIMAL, precision=12, scale=4),
    }
    row = {
        "js": '{"k": [1, 2.5, "three"], "s": "\\u00fc"}',
        "dt": "0000-00-00",
        "dtm": dt.datetime(2024, 2, 29, 13, 5, 0, 250000),
        "d": Decimal("1.5"),
    }
    assert queried_values(row, columns) == {
        "js": '{"k":[1,2.5,"three"],"s":"ü"}',
        "dt": None,
        "dtm": "2024-02-29 13:05:00.250",
        "d": "1.5000",
    }


def test_the_manifest_round_trips() -> None:
    manifest = SnapshotManifest("mariadb-bin.000002", 1234, "0-1-9", 1_700_000_000_000_000)
    manifest.column_types.append(("db.t", '{"id":"int"}'))
    manifest.files.append(("part-00000.arrow", 3))
    manifest.complete = True
    again = SnapshotManifest.from_bytes(manifest.to_bytes())
    assert again == manifest
    assert (again.position, again.rows) == (BinlogPosition("mariadb-bin.000002", 1234), 3)


def test_spilled_rows_come_back_as_one_unit_numbered_across_files(tmp_path: Path) -> None:
    spill = SnapshotSpill(Location(str(tmp_path / "spill")))
    spill.directory.make_dirs()
    files = []
    for index, ids in enumerate(([1, 2], [3])):
        keys = pa.array([json.dumps({"id": i}) for i in ids])
        afters = pa.array([json.dumps({"id": i, "v": "x"}) for i in ids])
        files.append((spill.write_file("db.t", keys, afters, index), len(ids)))
    types = types_json((MySqlColumn("id", FieldType.LONG), MySqlColumn("v", FieldType.VARCHAR)))
    values = SnapshotPartition((), 3, "snapshot:x", 5, "mysql:h", (("db.t", types),))
    partitions = snapshot_partitions(files, spill, values, rows_per_partition=2)
    assert len(partitions) == 2
    rows = [
        row
        for partition in partitions
        for batch in snapshot_rows(partition, column_types=True)  # type: ignore[arg-type]
        for row in batch.to_pylist()
    ]
    assert [(r["event_index"], r["txn_size"], r["txn_order"], r["op"]) for r in rows] == [
        (0, 3, 0, "r"),
        (1, 3, 0, "r"),
        (2, 3, 0, "r"),
    ]
    assert {r[TYPES_COLUMN] for r in rows} == {types}
    assert spill.exists()
    spill.clear()
    assert not spill.exists()
