"""Spark's warnings of data sources registered over others, quieted where spark-ckpt means it.

Spark registers the ``pyspark_*`` modules' data sources statically when a session first looks
one up, and :func:`spark_ckpt.install` registers its own subclasses of them over those (they
carry the session's control state). Spark's ``DataSourceManager`` warns of every such
replacement, once for each format at ``install()`` and again at the start of every streaming
query, whose session clone registers the session's data sources anew: warnings of nothing wrong,
which a user cannot act on, on the terminal of every user of ``install()``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DATA_SOURCE_MANAGER_LOGGER", "quiet_replaced_data_sources"]

DATA_SOURCE_MANAGER_LOGGER = "org.apache.spark.sql.execution.datasources.DataSourceManager"
"""The logger of Spark's ``DataSourceManager`` (Spark 4.x) and of its companion object."""

_log = logging.getLogger(__name__)


def quiet_replaced_data_sources(spark: SparkSession, format_name: str) -> bool:
    """Set Spark's ``DataSourceManager`` logger to errors only, from now on; True if it was.

    Runs on the driver, once per :func:`spark_ckpt.install`. The logger warns of three things in
    Spark 4.2: a data source that replaced a statically registered one, one that replaced an
    earlier registration (both what ``install()`` and every query's session clone do), and a
    failed lookup of the ``pyspark_*`` modules. That lookup runs once per JVM, at the first look
    for a data source: it is made here first (``format_name`` looked up), so that a failure of
    it still shows. The level is the JVM's, for every session of this driver. A session without
    a JVM in this process (a Spark Connect client: its server logs on its own), or whose JVM has
    no log4j 2, is left as it is (False).
    """
    try:
        session = spark._jsparkSession
        session.sessionState().dataSourceManager().dataSourceExists(format_name)
        log4j = spark._jvm.org.apache.logging.log4j  # type: ignore[union-attr]
        log4j.core.config.Configurator.setLevel(DATA_SOURCE_MANAGER_LOGGER, log4j.Level.ERROR)
    except Exception as e:  # no JVM here, or no log4j 2 in it: nothing to quiet
        _log.debug("left the JVM logger %s as it is: %s", DATA_SOURCE_MANAGER_LOGGER, e)
        return False
    return True
