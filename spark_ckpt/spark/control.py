"""``spark_ckpt.install(spark)``: the entry point of the driver-side control plane."""

from __future__ import annotations

import logging
import math
import os
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from pyspark.errors import StreamingQueryException

from spark_ckpt.errors import CheckpointPolicyError, ConfigError, UsageError, message_in_trace
from spark_ckpt.model.config import CkptConfig
from spark_ckpt.spark.jvm_logging import quiet_replaced_data_sources
from spark_ckpt.spark.listener import CheckpointListener, load_hooks
from spark_ckpt.spark.supervisor import SupervisedQuery, is_connect
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.registry import ControlState
from spark_ckpt.state.restore import (
    RestoreHandler,
    load_restore_handlers,
    notify_restore,
    restore_point,
)
from spark_ckpt.state.savepoints import Savepoint
from spark_ckpt.state.storage import S3A_KEYS, SCHEMES, StorageOptions, s3a_options

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from spark_ckpt.spark.metrics import MetricsExporter
    from spark_ckpt.state.hooks import CheckpointHook

    # How the listener learns a starting query's checkpoint root and sink (query_target).
    TargetLookup = Callable[[SparkSession, str], tuple[str, str] | None]

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
    state
        The driver-local state directory components register with.
    listener
        The checkpoint listener added to the session.
    formats
        The data source format names registered with the session.
    """

    spark: SparkSession
    state: ControlState
    listener: CheckpointListener
    config: CkptConfig
    formats: list[str] = field(default_factory=list)
    restore_handlers: dict[str, RestoreHandler] = field(default_factory=dict)
    """Told the exact checkpoint a supervised query resumes from, before each start."""
    build_lock: threading.Lock = field(default_factory=threading.Lock)
    """Serialises supervised builds, so each source claims the right query identity."""
    metrics: MetricsExporter | None = None
    """The Prometheus endpoint (``spark.ckpt.metrics.port``), when it serves."""

    def serve_metrics(self, config: CkptConfig) -> MetricsExporter | None:
        """Start the metrics endpoint ``config`` asks for, unless one serves already (driver)."""
        if self.metrics is None and config.metrics_port is not None:
            from spark_ckpt.spark.metrics import MetricsExporter

            try:
                self.metrics = MetricsExporter(config.metrics_port, config.metrics_host)
            except OSError as e:
                raise ConfigError(
                    f"spark.ckpt.metrics.port={config.metrics_port} on "
                    f"spark.ckpt.metrics.host={config.metrics_host}: the metrics endpoint "
                    f"cannot listen there ({e}); choose another port, or 0 for a free one"
                ) from e
            self.listener.metrics = self.metrics
        return self.metrics

    def stop_metrics(self) -> None:
        """Stop the metrics endpoint (driver; a later ``install()`` may start it again)."""
        exporter, self.metrics = self.metrics, None
        self.listener.metrics = None
        if exporter is not None:
            exporter.close()

    def read_config(self) -> CkptConfig:
        """The ``spark.ckpt.*`` settings as ``spark.conf`` holds them now (validated)."""
        return session_config(self.spark)

    def supervise(
        self,
        build: Callable[[], DataStreamWriter],
        *,
        checkpoint_location: str,
        name: str,
        hooks: list[CheckpointHook] | None = None,
        restore_from: Savepoint | str | None = None,
        path_mapping: Mapping[str, str] | None = None,
    ) -> SupervisedQuery:
        """Start ``build()``'s query under supervision (driver).

        The query is restarted from its checkpoint on failure as ``spark.ckpt.restartStrategy``
        allows (settings read from ``spark.conf`` now). ``build`` is called for every attempt and
        must return a fresh ``DataStreamWriter``; the supervisor sets the checkpoint location and
        the query name. ``hooks`` take part in every checkpoint (see :mod:`spark_ckpt.state.hooks`;
        they need the ``delta-2pc`` sink).

        ``restore_from`` (a :class:`~spark_ckpt.state.savepoints.Savepoint` or its location)
        is restored into ``checkpoint_location`` first, which must then be new (or hold this
        same restore already, so a restarted driver script may pass it again); the query
        continues exactly after the savepoint's batch. ``path_mapping`` maps old table path
        prefixes to new ones when the tables moved (or to fork into new tables). A restore
        that would skip or repeat data raises
        :class:`~spark_ckpt.errors.SavepointRestoreError` and starts nothing.
        """
        savepoint = (
            Savepoint.load(restore_from, self.state.storage)
            if isinstance(restore_from, str)
            else restore_from
        )
        return SupervisedQuery(
            self,
            build,
            checkpoint_location,
            name,
            self.read_config(),
            hooks,
            restore_from=savepoint,
            path_mapping=path_mapping,
        ).start()

    def watch(self, supervised: SupervisedQuery) -> None:
        """Route the listener's events about a supervised query's attempt to it."""
        assert supervised.query is not None
        self.listener.watch(str(supervised.query.id), supervised)

    def await_termination(self, query: StreamingQuery, timeout: float | None = None) -> bool:
        """Wait for ``query`` to end and for its components to finish up (driver).

        After it returns True, everything the query completed is published: a bounded run
        (``Trigger.availableNow``) leaves no tail behind.

        Parameters
        ----------
        query
            A query started in this session.
        timeout
            Seconds to wait in all (None: no limit).

        Returns
        -------
        bool
            False when the timeout passed first.

        Raises
        ------
        StreamingQueryException
            The query's own failure, as ``StreamingQuery.awaitTermination`` raises it.
        spark_ckpt.errors.CheckpointPolicyError
            When a source stopped the query because it broke the checkpoint failure policy
            (``spark.ckpt.tolerableFailedCheckpoints``), naming the reason chain.
        spark_ckpt.errors.ConfigError
            When the session's ``spark.ckpt.*`` settings were invalid as the query started
            (a misspelt key names the one it meant).
        spark_ckpt.errors.PublishError
            When the final publish of what the query completed failed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if timeout is None:
                query.awaitTermination()
            elif not query.awaitTermination(max(1, math.ceil(timeout))):
                return False
        except StreamingQueryException as e:
            # The control plane's own refusals come back as their typed errors.
            for error in (CheckpointPolicyError, ConfigError):
                message = message_in_trace(str(e), error)
                if message is not None:
                    self.listener.finished(str(query.runId)).wait(
                        None if deadline is None else max(0.0, deadline - time.monotonic())
                    )
                    raise error(message) from e
            raise
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not self.listener.finished(str(query.runId)).wait(remaining):
            return False
        failure = self.listener.final_error(str(query.runId))
        if failure is not None:
            # The query ended but what it completed could not all be published: never report
            # a clean end with a tail left behind.
            raise failure
        return True


def install(spark: SparkSession) -> Control:
    """Install spark-ckpt into ``spark``.

    Registers the ``txn-cdc`` and ``delta-2pc`` formats through the session (as subclasses that
    carry the control plane's state directory) and adds the checkpoint listener. Runs on the
    driver; a second call for the same session returns the same :class:`Control` (a second set
    of registrations would leave the first control's supervised sources unable to reach it).
    The formats also work without it (Spark registers ``pyspark_*`` modules statically); what
    install adds is policy: low-latency and tail publishing, supervised queries, and the
    Prometheus endpoint when ``spark.ckpt.metrics.port`` is set (a later call starts it when
    the key was set after the first; :meth:`Control.stop_metrics` stops it). From here on, the
    driver's JVM logs only errors of Spark's ``DataSourceManager``, which would warn at this
    call and at every query's start that the formats replaced their static registrations
    (:mod:`spark_ckpt.spark.jvm_logging`).

    Parameters
    ----------
    spark
        The active SparkSession.

    Returns
    -------
    Control
        Handle to what was installed.
    """
    config = session_config(spark)  # fail early if bad
    with _INSTALL_LOCK:
        existing = _INSTALLED.get(id(spark))
        if existing is not None and existing.spark is spark:
            existing.serve_metrics(config)
            return existing
        control = _install(spark, config)
        _INSTALLED[id(spark)] = control
        control.serve_metrics(config)
        return control


def session_config(spark: SparkSession) -> CkptConfig:
    """The session's ``spark.ckpt.*`` settings, validated, unknown keys refused (driver).

    Runs at ``install()`` and each time a supervised query starts.
    """
    return CkptConfig.from_conf(lambda key: spark.conf.get(key, None), spark.conf.getAll)


def session_storage_options(spark: SparkSession) -> StorageOptions:
    """The session's ``spark.hadoop.fs.s3a.*`` settings as storage options (driver, at install)."""
    conf = {}
    for key in S3A_KEYS:
        value = spark.conf.get(f"spark.hadoop.{key}", None)
        if value is not None:
            conf[key] = value
    return StorageOptions.of(s3a_options(conf))


def _check_server_reaches(spark: SparkSession, state: ControlState) -> None:
    """Refuse a Spark Connect server that cannot see the state directory (driver, at install).

    Sources and sinks run in the server's processes and tell the control plane about the
    queries they serve through files in the state directory, which lives on this machine. A
    server elsewhere would write them where nobody reads them: no low-latency or final publish,
    no declines reaching a supervisor, no drain.
    """
    from pyspark.sql.functions import udf

    marker = state.policy_path

    def visible() -> bool:
        return os.path.exists(marker)

    seen = spark.range(1).select(udf(visible, "boolean")().alias("seen")).collect()
    if not seen or not seen[0].seen:
        raise UsageError(
            f"the Spark Connect server cannot see spark-ckpt's state directory {state.directory} "
            f"on this machine: the control plane (install(), supervise()) needs a Connect "
            f"server on the same machine as the client, such as local_session(connect=True). "
            f"The txn-cdc and delta-2pc formats work without install() on any server"
        )


def query_target(spark: SparkSession, query_id: str) -> tuple[str, str] | None:
    """Active query ``query_id``'s checkpoint root and its sink's name (driver, classic only).

    Runs once per query start. Spark tells listeners neither the checkpoint location nor the
    sink; the query's ``StreamExecution`` knows both. Its ``resolvedCheckpointRoot`` is a
    qualified Hadoop URI (``file:/tmp/a%20b``), percent-encoded: decoded here for the storage
    layer. The sink's name is its table's (``delta-2pc`` for ours, a Python data source's
    ``name()``, ``KafkaTable`` for Spark's Kafka sink); a sink of Spark's first data source API
    (Delta's own sink, ``foreachBatch``, console, memory) has none (Spark's ``Sink.name`` throws
    "should not be called"), so its class name stands in: no restore handler has that name.
    None when the query is not active (any more).
    """
    from py4j.protocol import Py4JError

    jquery = spark._jsparkSession.streams().get(query_id)
    if jquery is None:
        return None
    execution = jquery.streamingQuery()
    root = urllib.parse.unquote(str(execution.resolvedCheckpointRoot()))
    sink = execution.sink()
    try:
        return root, str(sink.name())
    except Py4JError:
        return root, str(sink.getClass().getName())


def _restorer(
    spark: SparkSession,
    state: ControlState,
    handlers: dict[str, RestoreHandler],
    lookup: TargetLookup = query_target,
) -> Callable[[str], None]:
    """The listener's restore of each query as it starts (driver, classic sessions).

    Built once per install; the returned function runs on the listener's thread once per query
    start (and once more at the run's end when that restore failed).

    An unsupervised query restarted on its checkpoint resumes from it as a supervised attempt
    does: every restore handler learns the exact checkpoint (FLINK-20396). Only queries whose
    sink has a restore handler (by its name: ``delta-2pc``) are restored: other queries of the
    session keep state spark-ckpt has no part in, on stores it may not be able to read. A Spark
    Connect client has no JVM to ask: there the next batch's commit publishes what a killed run
    left, and ``spark-ckpt status`` shows it as pending until then.
    """
    # Each query's target as its run started: a retry after the run ended finds it no more.
    targets: dict[str, tuple[str, str]] = {}

    def restore(query_id: str) -> None:
        target = lookup(spark, query_id) or targets.get(query_id)
        if target is None:
            return
        targets[query_id] = target
        root, sink = target
        if sink not in handlers:
            return
        # "dbfs:/x" and "hdfs:/x" have a scheme without "//"; only a bare path is local.
        scheme = urllib.parse.urlsplit(root).scheme.lower() or "file"
        if scheme not in SCHEMES:
            return  # (hdfs://, dbfs:/) no component of ours can keep state where we cannot read
        notify_restore(restore_point(SparkCheckpoint(root, state.storage)), handlers)

    return restore


_INSTALL_LOCK = threading.Lock()
_INSTALLED: dict[int, Control] = {}


def _install(spark: SparkSession, config: CkptConfig) -> Control:
    state = ControlState(
        tempfile.mkdtemp(prefix="spark-ckpt-control-"), session_storage_options(spark)
    )
    state.write_policy(config)
    if is_connect(spark):
        _check_server_reaches(spark, state)

    def refresh_policy() -> None:
        # As each query starts: the settings its unsupervised sources apply (or the error).
        try:
            state.write_policy(session_config(spark))
        except ConfigError as e:
            state.write_policy(None, str(e))

    handlers = load_restore_handlers()
    restore = None if is_connect(spark) else _restorer(spark, state, handlers)
    listener = CheckpointListener(state, load_hooks(), refresh_policy, restore)
    control = Control(spark, state, listener, config, restore_handlers=handlers)
    entries = sorted(entry_points(group=DATA_SOURCE_GROUP), key=lambda e: e.name)
    if entries:
        # Registered over the static registrations on purpose: Spark would warn of each, here
        # and at every query's start.
        quiet_replaced_data_sources(spark, entries[0].load().name())
    for entry in entries:
        data_source = entry.load()
        # A subclass defined here is pickled by value, class attributes included, so every
        # process that runs it (reader, executors, sink commits) sees this session's state.
        bound = type(data_source.__name__, (data_source,), {"control_state": state})
        spark.dataSource.register(bound)
        control.formats.append(data_source.name())
        _log.debug("registered data source %s from %s", data_source.name(), entry.value)
    spark.streams.addListener(listener)
    return control
