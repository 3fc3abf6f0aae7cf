"""A timeline of a query's checkpoints as a PNG: what ``spark-ckpt plot`` draws (matplotlib).

Two panels over wall-clock time (UTC): each completed batch's duration, and each published
batch's publish latency (from the end of the batch to its Delta commit).
Declines are marked on the first panel, failures on both, and every restart of the query is a
vertical line through both (a stop by the user a dotted one). Rendered off-screen (Agg); the
CLI writes it through the storage layer, so the target may be local or on an object store.
"""

from __future__ import annotations

import datetime
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from spark_ckpt.model.events import DeclineEvent, FailureEvent, HistoryEvent, StartEvent
from spark_ckpt.model.failures import FailureReason
from spark_ckpt.state.history import CheckpointRecord, fold

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["render_history"]

_WIDTH_IN, _HEIGHT_IN, _DPI = 11.0, 6.0, 100


_DAY = 86_400.0


def _time(epoch: float) -> float:
    """Epoch seconds as matplotlib's date numbers (days since its epoch, 1970 by default)."""
    return epoch / _DAY


def render_history(events: Sequence[HistoryEvent], title: str) -> bytes:
    """The timeline of ``events`` (oldest first) as PNG bytes, 1100 x 600 pixels.

    Runs wherever the CLI runs, once per ``plot``. Needs at least one event with a time.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot's import
    import matplotlib.pyplot as plt

    records = fold(events)
    figure, (durations, latencies) = plt.subplots(
        2, 1, sharex=True, figsize=(_WIDTH_IN, _HEIGHT_IN), dpi=_DPI
    )
    try:
        _durations(durations, records)
        _latencies(latencies, records)
        _marks(durations, latencies, events)
        durations.set_title(title, loc="left", fontsize=11)
        latencies.xaxis_date(datetime.timezone.utc)
        latencies.set_xlabel("time (UTC)")
        for axes in (durations, latencies):
            axes.grid(True, alpha=0.3)
            handles, labels = axes.get_legend_handles_labels()
            if handles:
                unique = dict(zip(labels, handles, strict=True))
                axes.legend(unique.values(), unique.keys(), loc="upper left", fontsize=8)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=_DPI)
        return buffer.getvalue()
    finally:
        plt.close(figure)


def _durations(axes: Axes, records: list[CheckpointRecord]) -> None:
    done = [r for r in records if r.ended_at is not None and r.duration_ms is not None]
    times = [_time(r.ended_at or 0.0) for r in done]
    seconds = [(r.duration_ms or 0) / 1000 for r in done]
    axes.plot(times, seconds, marker="o", markersize=3, linewidth=1, label="batch duration")
    axes.set_ylabel("batch duration (s)")


def _latencies(axes: Axes, records: list[CheckpointRecord]) -> None:
    published = [r for r in records if r.publish_latency is not None]
    times = [_time(r.published_at or 0.0) for r in published]
    seconds = [r.publish_latency or 0.0 for r in published]
    axes.plot(
        times,
        seconds,
        marker="o",
        markersize=3,
        linewidth=1,
        color="tab:green",
        label="publish latency",
    )
    axes.set_ylabel("publish latency (s)")


def _marks(durations: Axes, latencies: Axes, events: Sequence[HistoryEvent]) -> None:
    starts = sorted(e.at for e in events if isinstance(e, StartEvent) and e.at is not None)
    for at in starts[1:]:  # the first start is the query's beginning, not a restart
        for axes in (durations, latencies):
            axes.axvline(_time(at), color="tab:red", linestyle="--", linewidth=1, label="restart")
    declines = [e.at for e in events if isinstance(e, DeclineEvent) and e.at is not None]
    _points(durations, declines, "x", "tab:orange", "declined")
    stopped = FailureReason.QUERY_STOPPED_BY_USER.name
    for event in events:  # a stop by the user is not a failure: a line of its own
        if isinstance(event, FailureEvent) and event.reason == stopped and event.at is not None:
            for axes in (durations, latencies):
                axes.axvline(
                    _time(event.at), color="grey", linestyle=":", linewidth=1, label="stopped"
                )
    failures = [
        e.at
        for e in events
        if isinstance(e, FailureEvent) and e.at is not None and e.reason != stopped
    ]
    for axes in (durations, latencies):
        _points(axes, failures, "v", "tab:red", "failure")


def _points(axes: Axes, times: list[float], marker: str, color: str, label: str) -> None:
    """Mark moments on the time axis (at y = 0), over the lines."""
    if times:
        zeros = [0.0] * len(times)
        axes.scatter(
            [_time(at) for at in times], zeros, marker=marker, color=color, label=label, zorder=3
        )
