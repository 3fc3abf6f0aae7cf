"""Mirrors follow a real PostgreSQL table through an application's migrations (both plugins).

One query streams ``txn-cdc`` (``columnTypes=true``) into ``delta-2pc`` ``mode=mirror`` while the
test runs a migration sequence on ``public.products``, each step followed by ordinary writes: add a
nullable column, add one with a default (existing rows read it), rename, drop, drop and re-add under
the same name with another type, widen ``integer`` to ``bigint`` and ``numeric`` precision, change a
``varchar`` length, DDL and DML in one transaction. After each step the mirror equals the table:
column names, types and values, row for row, read by delta-rs (``deltalake``) while the query
streams and, at the same checkpoint, by ``read_consistent`` (delta-spark) once it stopped
(``schema_migrations.MirrorSteps``). The change log holds each schema change as an ``op='s'`` row.
Then ``public.tags``, mirrored under ``schemaChangeBehavior=fail``, is renamed in a transaction that
also updates a product: the query stops with ``SchemaChangeError`` and publishes nothing of it;
restarted with ``evolve`` it follows. Last, a type change no widening expresses (``text`` to
``integer``) is followed by reading the table again in chunks while the other table streams: the
checkpoint index says the table is being rebuilt and shows it as before the change until the rebuilt
table is published. Apart, real SIGKILLs of the driver after a schema change's batch is
pre-committed and in its publish, then in a rebuild's first batch and in the publish that ends it
(``harness.faults.postgres_schema``), lose and repeat nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import schema_migrations
from conftest import pgoutput_then_wal2json_in_soak, wait_until

import spark_ckpt
from harness.faults.postgres_schema import mirror_table, run_scenario, source_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

pytestmark = pytest.mark.integration

PRODUCTS, TAGS = schema_migrations.PRODUCTS, schema_migrations.TAGS
_STEPS = schema_migrations.POSTGRES_STEPS
_create, _run = schema_migrations.create_postgres_tables, schema_migrations.run_postgres


def _source(dsn: str, name: str = PRODUCTS) -> tuple[dict[str, str], set[tuple[Any, ...]]]:
    return source_table(dsn, name)


_mirror = schema_migrations.mirror_of


def _start(
    spark: SparkSession, dsn: str, plugin: str, tmp_path: Path, slot: str, **sink: str
) -> StreamingQuery:
    writer = (
        spark.readStream.format("txn-cdc")
        .option("connector", "postgres")
        .option("plugin", plugin)
        .option("dsn", dsn)
        .option("slot", slot)
        .option("tables", f"{PRODUCTS},{TAGS}")
        .option("snapshot", "initial")
        .option("columnTypes", "true")
        .option("snapshotDir", str(tmp_path / "spill"))
        .option("snapshotChunkRows", "3")  # a table read again takes several batches
        .load()
        .writeStream.format("delta-2pc")
        .option("mode", "mirror")
        .option("path", str(tmp_path / "mirror"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    for key, value in sink.items():
        writer = writer.option(key, value)
    return writer.trigger(processingTime="300 milliseconds").start()


def _reported_schema_changes(query: StreamingQuery) -> list[str]:
    """The ``schemaChanges`` the source's status reported in the recent progress events."""
    found = []
    for progress in query.recentProgress:
        latest = progress.sources[0].latestOffset
        report = json.loads(latest) if isinstance(latest, str) else latest
        found += ((report or {}).get("status") or {}).get("schemaChanges") or []
    return found


@pgoutput_then_wal2json_in_soak
def test_mirror_follows_migrations_and_stops_on_what_it_cannot_follow(
    spark: SparkSession,
    control: spark_ckpt.Control,
    pg_dsn: str,
    pg_plugin: str,
    tmp_path: Path,
) -> None:
    _create(pg_dsn)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    root = tmp_path / "mirror"
    fail_tags = {"schemaChangeBehavior.public.tags": "fail"}
    query = _start(spark, pg_dsn, pg_plugin, tmp_path, "schema_follow", **fail_tags)
    steps = schema_migrations.MirrorSteps(root)

    def wait_equal(step: str, name: str = PRODUCTS) -> None:
        steps.wait_equal(query, step, name, lambda: _source(pg_dsn, name))

    try:
        wait_equal("the snapshot")
        for step, statements in _STEPS:
            _run(pg_dsn, statements)
            wait_equal(step)
            if step == "rename a column":  # progress events say what the batch changed
                wait_until(
                    lambda: (
                        "public.products: column_renamed name -> title"
                        in _reported_schema_changes(query)
                    ),
                    30,
                    "no progress event reported the rename",
                )
        assert schema_migrations.newest_of(root) == _source(pg_dsn), "delta-rs reads another"
        changes = spark.read.format("delta").load(str(root / "_changes")).where("op = 's'")
        kinds = [
            change["change"]
            for row in changes.orderBy("txn_order", "event_index").collect()
            for change in json.loads(row["after"])["changes"]
        ]
        assert "column_renamed" in kinds, kinds
        assert "column_dropped" in kinds, kinds
        assert kinds.count("column_type_changed") >= 3, kinds

        # schemaChangeBehavior=fail for tags: a rename there stops the query, nothing of its
        # batch published (the products update in the same transaction included).
        published = _mirror(spark, root, TAGS)
        _run(
            pg_dsn,
            [
                "BEGIN",
                "ALTER TABLE tags RENAME COLUMN label TO name",
                "UPDATE tags SET name = 'renamed' WHERE id = 1",
                "UPDATE products SET qty = 11 WHERE id = 1",
                "COMMIT",
            ],
        )
        wait_until(lambda: query.exception() is not None, 120, "the query did not stop")
        message = str(query.exception())
        assert "SchemaChangeError" in message, message
        assert "public.tags" in message, message
        assert "column_renamed label -> name" in message, message
        assert _mirror(spark, root, TAGS) == published
        assert _mirror(spark, root) != _source(pg_dsn), "the products update was published"

        # Restarted with evolve for tags, as the error says: the query follows the rename.
        query = _start(spark, pg_dsn, pg_plugin, tmp_path, "schema_follow")
        wait_equal("the restart with evolve")
        wait_equal("the restart with evolve", TAGS)

        # A type change no widening expresses (the source converted every stored value, which
        # the stream does not carry): the table is read again in chunks of 3 rows while tags
        # streams on; the mirror shows products as before the change until the new read is
        # complete, then the rebuilt table.
        published = _mirror(spark, root)
        _run(
            pg_dsn,
            [
                "ALTER TABLE products ALTER COLUMN sku TYPE integer USING length(sku)",
                "UPDATE products SET qty = 7 WHERE id = 1",
                "UPDATE tags SET name = 'during the rebuild' WHERE id = 2",
            ],
        )
        wait_equal("the rebuild after a type change")
        wait_equal("the rebuild after a type change", TAGS)
        assert schema_migrations.newest_of(root) == _source(pg_dsn), "delta-rs reads another"
        index = spark.read.format("delta").load(str(root / "_checkpoints"))
        during = index.where("rebuilding IS NOT NULL").orderBy("checkpoint_id").collect()
        assert during, "no checkpoint said products was being rebuilt"
        assert {row["table"] for row in during} == {PRODUCTS}, during
        assert "column_type_changed sku" in during[0]["rebuilding"], during[0]
        old = index.where(f"checkpoint_id = {during[0]['checkpoint_id'] - 1}")
        before = old.where(f"`table` = '{PRODUCTS}'").first()
        assert before is not None
        assert {row["version"] for row in during} == {before["version"]}, (during, before)
        shown = spark_ckpt.read_consistent(spark, str(root), during[-1]["checkpoint_id"])
        assert PRODUCTS in shown.rebuilding, shown.rebuilding
        assert mirror_table(shown[PRODUCTS]) == published, "it changed"
        assert spark_ckpt.read_consistent(spark, str(root)).rebuilding == {}
        rebuild = spark.read.format("delta").load(str(root / "_changes")).where("op = 's'")
        marks = [json.loads(r["after"]).get("rebuild") for r in rebuild.collect()]
        assert marks.count("begin") == 1, marks
        assert marks.count("end") == 1, marks
    finally:
        query.stop()
    steps.check(spark)  # every step's checkpoint, read through delta-spark


@pytest.mark.parametrize(
    "every_kill",
    [
        pytest.param(False, id="ddl-and-rebuild"),
        pytest.param(True, id="every-kill", marks=pytest.mark.soak),
    ],
)
def test_driver_killed_between_a_schema_change_and_its_publish_loses_and_repeats_nothing(
    spark: SparkSession, pg_dsn: str, tmp_path: Path, every_kill: bool
) -> None:
    """Real SIGKILLs around a schema change's batch, then around a rebuild.

    After the schema change's batch is pre-committed, then in the rebuild's chunks; in the soak
    tier also in the schema change's publish (one mirror published, the other not) and once the
    rebuild's first batch is pre-committed.

    pgoutput only: the kill test of the other postgres path runs wal2json (in the soak tier),
    and what recovery does after the pre-commit does not depend on the plugin. The test
    command's postgres kill test: its kills fall at the pre-commit and inside a rebuild's
    snapshot chunks.
    """
    verdict = run_scenario(spark, pg_dsn, tmp_path, "pgoutput", every_kill)
    assert verdict.ok, verdict
