"""A JVM logger of the driver quieted for one call, where Spark warns of what spark-ckpt meant.

Spark registers the ``pyspark_*`` modules' data sources statically when a session starts, and
:func:`spark_ckpt.install` registers its own subclasses of them over those (they carry the
session's control state). Spark's ``DataSourceManager`` warns of every such replacement, once for
each format, on the terminal of every user of ``install()``: a warning of nothing wrong, which a
user cannot act on. Quieting that logger for the registration only keeps every other warning it
may log.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession

__all__ = ["DATA_SOURCE_MANAGER_LOGGER", "quieted"]

DATA_SOURCE_MANAGER_LOGGER = "org.apache.spark.sql.execution.datasources.DataSourceManager"
"""The logger of Spark's ``DataSourceManager`` (Spark 4.x), which warns of replaced data sources."""

_log = logging.getLogger(__name__)


@contextlib.contextmanager
def quieted(spark: SparkSession, logger: str, level: str = "ERROR") -> Iterator[None]:
    """Run the block with the driver's JVM logger ``logger`` at ``level``, then put it back.

    Runs on the driver, once per :func:`spark_ckpt.install`. Put back means as it was: a logger
    that had a level of its own gets it again; one that took its parent's loses the one set
    here, so it follows its parent again (``SparkContext.setLogLevel`` sets the root's). A
    session without a JVM in this process (a Spark Connect client: its server logs on its own),
    or whose JVM has no log4j 2, runs the block unchanged.
    """
    try:
        log4j = spark._jvm.org.apache.logging.log4j  # type: ignore[union-attr]
        context = log4j.LogManager.getContext(False)
        configuration = context.getConfiguration()
        config = configuration.getLoggerConfig(logger)
        own = config.getName() == logger
        previous = config.getLevel() if own else None
        log4j.core.config.Configurator.setLevel(logger, log4j.Level.getLevel(level))
    except Exception as e:  # no JVM here, or no log4j 2 in it: nothing to quiet
        _log.debug("left the JVM logger %s as it is: %s", logger, e)
        yield
        return
    try:
        yield
    finally:
        if own:
            config.setLevel(previous)
        else:
            configuration.removeLogger(logger)
        context.updateLoggers()
