"""The formats are available after pip install (static registration) and after install()."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import spark_ckpt

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_static_registration_needs_no_register_call_and_install_replaces_it_quietly(
    tmp_path: Path,
) -> None:
    """A fresh process that never called install() can use format('txn-cdc').

    Its install() afterwards registers the formats over the static ones, and its next query's
    session clone registers them again, without Spark's warning of each replacement on the
    terminal.
    """
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "0001.jsonl").write_text(
        '{"op": "c", "before": null, "after": {"id": 1}, "source": {"table": "t"}}\n'
    )
    script = textwrap.dedent(
        f"""
        import os, sys
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]")
                 .config("spark.ui.enabled", "false").getOrCreate())

        def run(name):
            frame = (spark.readStream.format("txn-cdc").option("connector", "debezium-json")
                     .load({str(tmp_path / "log")!r}))
            query = (frame.writeStream.format("memory").queryName(name)
                     .trigger(availableNow=True)
                     .option("checkpointLocation", {str(tmp_path)!r} + "/ckpt-" + name).start())
            query.awaitTermination(120)
            print("ROWS", name, spark.table(name).count())

        run("static")
        import spark_ckpt
        print("FORMATS", sorted(spark_ckpt.install(spark).formats))
        run("installed")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert "ROWS static 1" in result.stdout, result.stderr[-3000:]
    assert "FORMATS ['delta-2pc', 'txn-cdc']" in result.stdout, result.stderr[-3000:]
    assert "ROWS installed 1" in result.stdout, result.stderr[-3000:]
    assert "replaced a statically registered data source" not in result.stderr


@pytest.mark.quick
def test_install_registers_the_formats(spark: SparkSession, tmp_path: Path) -> None:
    """install(spark) registers txn-cdc through the session as well."""
    control = spark_ckpt.install(spark)
    assert "txn-cdc" in control.formats
    assert "delta-2pc" in control.formats
    assert spark_ckpt.install(spark) is control, "a second install must not re-register"
    (tmp_path / "log").mkdir()
    frame = (
        spark.readStream.format("txn-cdc")
        .option("connector", "debezium-json")
        .load(str(tmp_path / "log"))
    )
    assert frame.isStreaming
