"""The control plane's Prometheus endpoint (``spark.ckpt.metrics.port``), driver only.

:class:`MetricsExporter` serves :data:`spark_ckpt.model.metrics.METRICS` with Prometheus' own
client library (``prometheus_client``: its HTTP server, its exposition format). The values come
from the queries' histories: every event this process appends to a history is handed to a
worker thread (:func:`spark_ckpt.state.history.observe_appends`) that folds it into that query's
:class:`~spark_ckpt.model.metrics.QueryMetrics`; the first event of a query the exporter has
not seen yet loads the query's whole stored history first, so counters go on across restarts
of the query and of the driver (as far back as the history reaches). A custom collector
computes the samples when scraped, so "now minus X" gauges grow while a query stalls.

Queries are labelled with their names, learnt from the listener (start events, and which
checkpoint location the query's components registered); a query whose name is not known yet
is labelled with its checkpoint location.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from spark_ckpt.model.metrics import METRICS, Family, QueryMetrics, event_key
from spark_ckpt.state.history import HistoryLog, observe_appends

if TYPE_CHECKING:
    from spark_ckpt.model.events import HistoryEvent

__all__ = ["MetricsExporter", "prometheus_families"]

_log = logging.getLogger(__name__)

# What the worker is handed: an event appended to a history (None: only load the history), a
# flush marker to set, or None to stop.
_Item = tuple[HistoryLog, "HistoryEvent | None"] | threading.Event | None


def prometheus_families(families: dict[str, Family]) -> Iterator[Metric]:
    """``families`` as ``prometheus_client`` metric families (every declared one, in order)."""
    for spec in METRICS:
        family = families.get(spec.name) or Family(spec)
        labels = list(spec.labels)
        metric: Any
        if spec.kind == "counter":
            metric = CounterMetricFamily(spec.name, spec.help, labels=labels)
        elif spec.kind == "gauge":
            metric = GaugeMetricFamily(spec.name, spec.help, labels=labels)
        else:
            metric = HistogramMetricFamily(spec.name, spec.help, labels=labels)
        for values, value in family.samples.items():
            if spec.kind == "histogram":
                buckets = [
                    ("+Inf" if math.isinf(bound) else repr(float(bound)), count)
                    for bound, count in family.buckets[values]
                ]
                metric.add_metric(list(values), buckets, value)
            else:
                metric.add_metric(list(values), value)
        yield metric


class _Collector:
    """What the registry asks at each scrape."""

    def __init__(self, exporter: MetricsExporter) -> None:
        self._exporter = exporter

    def collect(self) -> Iterator[Metric]:
        try:
            families = self._exporter.families()
        except Exception:  # a scrape never fails because one query's values are odd
            _log.exception("computing spark-ckpt's metrics failed")
            families = {}
        yield from prometheus_families(families)


class MetricsExporter:
    """Folds history events into metrics and serves them on ``host:port`` (driver).

    Parameters
    ----------
    port
        The port to listen on; 0 takes a free one (:attr:`port` tells which).
    host
        The address to bind.
    clock
        Epoch seconds now (scrape time).
    serve
        False: no HTTP server (tests read :meth:`families` or :meth:`exposition`).
    """

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        clock: Callable[[], float] = time.time,
        serve: bool = True,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._queries: dict[str, QueryMetrics] = {}
        self._loaded: dict[str, set[tuple[str, float | None, int | None]]] = {}
        self._names: dict[str, str] = {}  # history root -> query name
        self._ids: dict[str, str] = {}  # query id -> name
        self._active: dict[str, bool] = {}  # query name -> a run is active
        self._events: queue.Queue[_Item] = queue.Queue()
        self._worker = threading.Thread(target=self._run, name="spark-ckpt-metrics", daemon=True)
        self._worker.start()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        self._server: Any = None
        self.port: int | None = None
        """The port the endpoint listens on (None: not serving)."""
        self.host = host
        if serve:
            self._server, _ = start_http_server(port, addr=host, registry=self.registry)
            self.port = int(self._server.server_port)
            _log.info("spark-ckpt metrics on http://%s:%d/metrics", host, self.port)
        self._stop_observing = observe_appends(self._appended)

    # -- what the control plane tells it ------------------------------------------------------

    def _appended(self, log: HistoryLog, event: HistoryEvent) -> None:
        self._events.put((log, event))

    def started(self, query_id: str, name: str | None) -> None:
        """A run of query ``query_id`` started (listener)."""
        with self._lock:
            if name:
                self._ids[query_id] = name
            self._active[self._ids.get(query_id, query_id)] = True

    def terminated(self, query_id: str) -> None:
        """The run of query ``query_id`` ended (listener)."""
        with self._lock:
            self._active[self._ids.get(query_id, query_id)] = False

    def bind(self, query_id: str, name: str | None, history: HistoryLog) -> None:
        """Query ``query_id`` (named ``name``) keeps its history in ``history`` (listener)."""
        with self._lock:
            if name:
                self._ids[query_id] = name
            self._names[history.root.url] = self._ids.get(query_id, query_id)
        self._events.put((history, None))  # load it, even if nothing is appended for a while

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every event handed over so far is folded in (tests); False on timeout."""
        done = threading.Event()
        self._events.put(done)
        return done.wait(timeout)

    # -- the worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._events.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()  # everything before it is folded in
                continue
            log, event = item
            try:
                self._fold(log, event)
            except Exception:
                _log.exception("folding a history event into the metrics failed")

    def _fold(self, log: HistoryLog, event: HistoryEvent | None) -> None:
        root = log.root.url
        with self._lock:
            metrics = self._queries.get(root)
        if metrics is None:
            # First sight of this query: what its history already holds (the event just
            # appended included), so counters go on from there.
            stored = log.events()
            metrics = QueryMetrics()
            metrics.observe_all(stored)
            with self._lock:
                self._queries[root] = metrics
                self._loaded[root] = {event_key(e) for e in stored}
        if event is None:
            return
        with self._lock:
            if event_key(event) in self._loaded[root]:
                return
            metrics.observe(event)

    # -- reading ------------------------------------------------------------------------------

    def families(self) -> dict[str, Family]:
        """Every query's samples now, merged by metric name (scrape time)."""
        now = self._clock()
        merged = {spec.name: Family(spec) for spec in METRICS}
        with self._lock:
            for root, metrics in self._queries.items():
                query = self._names.get(root, root)
                for name, family in metrics.families(query, now).items():
                    merged[name].samples.update(family.samples)
                    merged[name].buckets.update(family.buckets)
            active = merged["spark_ckpt_query_active"].samples
            for query, running in self._active.items():
                active[(query,)] = 1.0 if running else 0.0
        return merged

    def exposition(self) -> str:
        """The text a scrape gets (Prometheus' text format, written by ``prometheus_client``)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def close(self) -> None:
        """Stop serving and observing (driver; idempotent)."""
        self._stop_observing()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            self.port = None
        self._events.put(None)
