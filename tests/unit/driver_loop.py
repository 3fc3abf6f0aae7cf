"""Drive a txn-cdc reader the way Spark's MicroBatchExecution does, without a JVM.

Spark calls ``latestOffset`` / ``partitions`` / ``commit`` on one long-lived reader in the driver
and ``read`` on executors from a separately pickled copy. This loop does the same with a fresh
reader for every read, so nothing planned in the driver can leak into ``read``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.datasource import ReadLimit

from spark_ckpt.sources.options import SourceOptions
from spark_ckpt.sources.reader import TxnCdcStreamReader, make_connector


def make_reader(options: Mapping[str, str]) -> TxnCdcStreamReader:
    parsed = SourceOptions.parse(options)
    return TxnCdcStreamReader(parsed, make_connector(parsed))


@dataclass
class Batch:
    start: dict[str, Any]
    end: dict[str, Any]
    rows: list[dict[str, Any]]


def read_batch(
    options: Mapping[str, str], start: dict[str, Any], end: dict[str, Any]
) -> list[dict[str, Any]]:
    """Plan (start, end) on a fresh reader, as after a restart, and read every partition."""
    planner = make_reader(options)
    rows: list[dict[str, Any]] = []
    for partition in planner.partitions(start, end):
        executor = make_reader(options)
        for batch in executor.read(partition):
            rows += batch.to_pylist()
    return rows


def run(
    reader: TxnCdcStreamReader,
    options: Mapping[str, str],
    start: dict[str, Any] | None = None,
    limit: ReadLimit | None = None,
    max_batches: int = 100_000,
) -> tuple[list[Batch], dict[str, Any]]:
    """Run batches until the reader returns its start offset; return them and the last offset."""
    offset = reader.initialOffset() if start is None else start
    limit = reader.getDefaultReadLimit() if limit is None else limit
    batches: list[Batch] = []
    for _ in range(max_batches):
        end = reader.latestOffset(offset, limit)
        if end == offset:
            return batches, offset
        rows: list[dict[str, Any]] = []
        for partition in reader.partitions(offset, end):
            executor = make_reader(options)
            for record_batch in executor.read(partition):
                rows += record_batch.to_pylist()
        batches.append(Batch(offset, end, rows))
        reader.commit(end)
        offset = end
    raise AssertionError(f"the reader did not run dry within {max_batches} batches")
