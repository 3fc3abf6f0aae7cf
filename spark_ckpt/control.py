"""``spark_ckpt.install(spark)``: the entry point of the driver-side control plane."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DATA_SOURCE_GROUP", "Control", "install"]

DATA_SOURCE_GROUP = "spark_ckpt.data_sources"
"""Entry-point group under which sources and sinks advertise their Python data sources.

The control plane never imports ``spark_ckpt.sources`` or ``spark_ckpt.sinks`` (they build on it,
not the reverse): it registers whatever the installed distributions advertise here.
"""

_log = logging.getLogger(__name__)


@dataclass
class Control:
    """What :func:`install` set up for one SparkSession (driver).

    Attributes
    ----------
    spark
        The session it was installed into.
    formats
        The data source format names registered with the session.
    """

    spark: SparkSession
    formats: list[str] = field(default_factory=list)


def install(spark: SparkSession) -> Control:
    """Install spark-ckpt into ``spark``: register the ``txn-cdc`` and ``delta-2pc`` formats.

    Runs on the driver, once per session; calling it again re-registers (harmless). The formats
    also work without it (Spark registers ``pyspark_*`` modules statically); registering through
    the session makes them available even when the static lookup ran before installation.

    Parameters
    ----------
    spark
        The active SparkSession.

    Returns
    -------
    Control
        Handle to what was installed.
    """
    control = Control(spark)
    for entry in sorted(entry_points(group=DATA_SOURCE_GROUP), key=lambda e: e.name):
        data_source = entry.load()
        spark.dataSource.register(data_source)
        control.formats.append(data_source.name())
        _log.debug("registered data source %s from %s", data_source.name(), entry.value)
    return control
