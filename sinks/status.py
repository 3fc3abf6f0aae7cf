"""What ``spark-ckpt status`` says about a checkpoint location's ``delta-2pc`` sink.

Registered under the ``spark_ckpt.status_reporters`` entry point group, so the CLI imports no
sink. Reads the sink's manifests in the checkpoint location and the table's ``txn`` version.
"""

from __future__ import annotations

from typing import Any

from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.storage import Location

from .manifest import ManifestStore
from .table import load_table

__all__ = ["report"]


def report(checkpoint: SparkCheckpoint) -> dict[str, Any] | None:
    """The sink's state for ``checkpoint`` (None: no ``delta-2pc`` state there).

    Runs wherever the CLI runs, once per ``status``. ``published`` is the newest batch the table
    holds (its ``txn`` version for the query); ``pending`` the batches Spark completed that are
    not published yet; ``staged`` the later batches with a manifest (pre-committed, their
    checkpoint not complete).
    """
    store = ManifestStore(checkpoint)
    table_url = store.table()
    if table_url is None:
        return None
    table = Location(table_url, checkpoint.options)
    delta = load_table(table)
    published = None if delta is None else delta.transaction_version(checkpoint.query_id())
    floor = -1 if published is None else published
    completed = set(checkpoint.committed_batches())
    waiting = [b for b in store.batch_ids() if b > floor]
    return {
        "sink": "delta-2pc",
        "table": table.url,
        "tableVersion": None if delta is None else delta.version(),
        "published": published,
        "pending": [b for b in waiting if b in completed],
        "staged": [b for b in waiting if b not in completed],
    }
