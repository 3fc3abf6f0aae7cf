"""Primary-key chunks on the real server: they cover a table once, and know what they saw."""

from __future__ import annotations

import json

import psycopg
import pytest

from spark_ckpt.errors import TableCaptureError
from spark_ckpt.sources.postgres.chunks import ChunkBounds, next_chunk, read_chunk
from spark_ckpt.sources.postgres.tables import describe_tables


def test_chunks_cover_a_table_once_in_key_order(pg_dsn: str) -> None:
    """A composite key declared out of column order: chunks of 128 cover 1,000 rows exactly."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE c (id int, part text, v numeric, PRIMARY KEY (part, id))")
        conn.execute(
            "INSERT INTO c SELECT g, chr(97 + g % 3) || 'é', g / 7.0 "
            "FROM generate_series(1, 1000) g"
        )
        (table,) = describe_tables(conn, ["public.c"])
        chunks = [next_chunk(conn, table, 0, None, 128)]
        while chunks[-1].upto is not None:
            chunks.append(next_chunk(conn, table, len(chunks), chunks[-1].upto, 128))
    assert len(chunks) == 8  # 7 full chunks and an open-ended last one
    assert all(ChunkBounds.from_json(c.to_json()) == c for c in chunks)
    keys: list[str | None] = []
    for bounds in chunks:
        rows = read_chunk(pg_dsn, table, bounds)
        assert len(rows.keys) == (128 if bounds.upto is not None else 1000 - 7 * 128)
        keys += rows.keys.to_pylist()
    assert len(keys) == len(set(keys)) == 1000
    # The key's text lists its columns in table order, as wal2json does.
    assert keys[0] is not None
    assert list(json.loads(keys[0])) == ["id", "part"]


def test_a_chunk_knows_which_transactions_it_saw(pg_dsn: str) -> None:
    """Committed before the read: seen (its row is in the chunk). In progress: not seen."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE s (id int PRIMARY KEY)")
        conn.execute("INSERT INTO s VALUES (1)")
        (table,) = describe_tables(conn, ["public.s"])
    with psycopg.connect(pg_dsn) as done, psycopg.connect(pg_dsn) as open_:
        row = done.execute("INSERT INTO s VALUES (2) RETURNING txid_current()").fetchone()
        assert row is not None
        seen = int(row[0])
        done.commit()
        row = open_.execute("INSERT INTO s VALUES (3) RETURNING txid_current()").fetchone()
        assert row is not None
        unseen = int(row[0])
        rows = read_chunk(pg_dsn, table, ChunkBounds("public.s", 0, None, None))
        open_.commit()
    assert [json.loads(k or "")["id"] for k in rows.keys.to_pylist()] == [1, 2]
    assert rows.snapshot.saw(seen)
    assert not rows.snapshot.saw(unseen)


def test_a_table_without_primary_key_cannot_be_chunked(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE n (a int, b text)")
        conn.execute("ALTER TABLE n REPLICA IDENTITY FULL")
        (table,) = describe_tables(conn, ["public.n"])
        with pytest.raises(TableCaptureError, match=r"no primary key.*snapshot=initial"):
            next_chunk(conn, table, 0, None, 10)
