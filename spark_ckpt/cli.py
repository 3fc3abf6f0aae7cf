"""The ``spark-ckpt`` command: look at a query's checkpoints without reading JSON files.

``spark-ckpt history CKPT`` prints one line per checkpoint (batch) from the history spark-ckpt
keeps in the checkpoint location: the source transactions it covers, rows, duration, the Delta
version it was published as and how long that took, declines, failures and restarts.
``--json`` prints the same as one JSON object per line. ``spark-ckpt plot CKPT -o FILE.png``
draws it as a timeline (:mod:`spark_ckpt.history_plot`). ``spark-ckpt status CKPT`` says where
the query stands: last completed batch, batches in flight, starts and failures, what each source
holds back (changes of incomplete transactions, a snapshot in progress: how many, since when and
why), and what each sink reports (``delta-2pc``: published up to, pending and staged batches).
``spark-ckpt savepoint create|restore|list|inspect`` takes and restores savepoints
(:mod:`spark_ckpt.state.savepoints`). ``CKPT`` is a local
path or an object store URI; settings for the store come from the environment's standard
variables and ``--storage-option KEY=VALUE``.

Runs wherever it is invoked (no Spark, no JVM). Errors are one line on stderr: exit status 1 for
a failure (unreachable store, unreadable history), 2 for a usage error (as argparse does).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from importlib.metadata import entry_points
from typing import Any, TextIO

from spark_ckpt import __version__
from spark_ckpt.errors import SparkCkptError, UsageError
from spark_ckpt.model.events import (
    CompletedEvent,
    DeclineEvent,
    FailureEvent,
    HistoryEvent,
    StartEvent,
)
from spark_ckpt.model.held_back import describe_duration
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import CheckpointRecord, HistoryLog
from spark_ckpt.state.savepoints import (
    Savepoint,
    create_savepoint,
    list_savepoints,
    restore_savepoint,
)
from spark_ckpt.state.storage import Location, StorageOptions

__all__ = ["build_parser", "main"]

_PROG = "spark-ckpt"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (the console script's entry point)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args, sys.stdout))
    except SparkCkptError as e:
        print(f"{_PROG}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `spark-ckpt history ... | head`
        return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``spark-ckpt`` command line as argparse parses it (driver, once per run).

    The documentation's CLI reference is rendered from it too (``docs/hooks/reference.py``).
    """
    parser = argparse.ArgumentParser(
        prog=_PROG, description="Look at the checkpoints of a spark-ckpt query."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    history = commands.add_parser(
        "history",
        help="one line per checkpoint: transactions, duration, publication, declines, restarts",
        description="One line per checkpoint (batch) the history in CKPT knows, oldest first.",
    )
    _common(history)
    history.add_argument("--json", action="store_true", help="one JSON object per checkpoint")
    history.set_defaults(run=_history)
    status = commands.add_parser(
        "status",
        help="last completed and published batch, held-back data, pending manifests, restarts",
        description="Where the query in CKPT stands now.",
    )
    _common(status)
    status.add_argument("--json", action="store_true", help="one JSON object")
    status.set_defaults(run=_status)
    plot = commands.add_parser(
        "plot",
        help="a timeline PNG: batch durations, publish latency, declines, failures, restarts",
        description="Draw CKPT's history as a timeline (PNG, 1100 x 600 pixels).",
    )
    _common(plot)
    plot.add_argument("-o", "--output", required=True, metavar="FILE.png", help="where to write")
    plot.set_defaults(run=_plot)
    _savepoint_parsers(commands)
    return parser


def _savepoint_parsers(commands: Any) -> None:
    savepoint = commands.add_parser(
        "savepoint",
        help="take, restore, list and inspect savepoints",
        description="Savepoints: user-owned copies of a query's state at a published batch.",
    )
    actions = savepoint.add_subparsers(title="actions", required=True, metavar="ACTION")
    create = actions.add_parser(
        "create",
        help="take a savepoint of CKPT in a new directory below TARGET",
        description="Take a savepoint at CKPT's newest completed and published batch (the "
        "query may be running). Prints the savepoint's location.",
    )
    _common(create)
    create.add_argument("target", metavar="TARGET", help="the directory savepoints go below")
    create.add_argument("--name", help="the query's name, recorded in the savepoint")
    create.add_argument("--json", action="store_true", help="print the savepoint as JSON")
    create.set_defaults(run=_savepoint_create)
    restore = actions.add_parser(
        "restore",
        help="prepare a new checkpoint location that continues after the savepoint",
        description="Copy SAVEPOINT into the new checkpoint location CKPT, after checking that "
        "the tables it writes to hold exactly its batches. Start the query on CKPT afterwards.",
    )
    restore.add_argument("savepoint", metavar="SAVEPOINT", help="a savepoint directory")
    _common(restore)
    restore.add_argument(
        "--map",
        metavar="OLD=NEW",
        action="append",
        default=[],
        help="a table moved (or forks) from the path prefix OLD to NEW; repeatable",
    )
    restore.set_defaults(run=_savepoint_restore)
    listing = actions.add_parser(
        "list",
        help="the savepoints below a directory, oldest first",
        description="One line per complete savepoint below DIR.",
    )
    listing.add_argument("directory", metavar="DIR", help="where savepoints were taken to")
    _storage_argument(listing)
    listing.add_argument("--json", action="store_true", help="one JSON object per savepoint")
    listing.set_defaults(run=_savepoint_list)
    inspect = actions.add_parser(
        "inspect",
        help="what a savepoint holds",
        description="The savepoint's batch, query, tables, source offsets and files.",
    )
    inspect.add_argument("savepoint", metavar="SAVEPOINT", help="a savepoint directory")
    _storage_argument(inspect)
    inspect.add_argument("--json", action="store_true", help="its _savepoint.json")
    inspect.set_defaults(run=_savepoint_inspect)


def _common(command: argparse.ArgumentParser) -> None:
    command.add_argument("checkpoint", metavar="CKPT", help="the query's checkpointLocation")
    _storage_argument(command)


def _storage_argument(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--storage-option",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="a storage setting in delta-rs's spelling (AWS_ENDPOINT_URL=...); repeatable",
    )


def _storage(pairs: list[str]) -> StorageOptions:
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--storage-option expects KEY=VALUE, got {pair!r}")
        options[key] = value
    return StorageOptions.of(options)


def _checkpoint(args: argparse.Namespace) -> SparkCheckpoint:
    checkpoint = SparkCheckpoint(args.checkpoint, _storage(args.storage_option))
    if not checkpoint.root.exists():
        raise UsageError(f"no checkpoint location at {checkpoint.root.url}")
    return checkpoint


def _plot(args: argparse.Namespace, out: TextIO) -> int:
    from spark_ckpt.history_plot import render_history

    checkpoint = _checkpoint(args)
    events = HistoryLog(checkpoint).events()
    if not any(e.at is not None for e in events):
        raise UsageError(
            f"no history to plot in {checkpoint.root.url} (spark_ckpt.install() records it)"
        )
    target = Location(args.output, checkpoint.options)
    target.write_bytes(render_history(events, f"spark-ckpt: {checkpoint.root.url}"))
    out.write(f"wrote {target.url}\n")
    return 0


STATUS_GROUP = "spark_ckpt.status_reporters"
"""Entry points ``name -> report(checkpoint) -> dict | None`` a sink registers for ``status``."""


def _status(args: argparse.Namespace, out: TextIO) -> int:
    checkpoint = _checkpoint(args)
    completed = checkpoint.committed_batches()
    logged = checkpoint.logged_batches()
    events = HistoryLog(checkpoint).events()
    starts = [e for e in events if isinstance(e, StartEvent)]
    failures = [e for e in events if isinstance(e, FailureEvent)]
    state: dict[str, Any] = {
        "checkpoint": checkpoint.root.url,
        "queryId": checkpoint.query_id() if checkpoint.child("metadata").exists() else None,
        "lastCompleted": completed[-1] if completed else None,
        "inFlight": [b for b in logged if not completed or b > completed[-1]],
        "starts": len(starts),
        "lastStart": _start_json(starts[-1]) if starts else None,
        "failures": len(failures),
        "lastFailure": _failure_json(failures[-1]) if failures else None,
        "sources": _source_statuses(events),
        "heldBack": _held_back(events),
        "schemaChanges": _schema_changes(events),
        "sinks": {},
    }
    for entry in sorted(entry_points(group=STATUS_GROUP), key=lambda e: e.name):
        report = entry.load()(checkpoint)
        if report is not None:
            state["sinks"][entry.name] = report
    if args.json:
        out.write(json.dumps(state) + "\n")
        return 0
    for key, value in _status_lines(state):
        out.write(f"{key:<14}{value}\n")
    return 0


def _source_statuses(events: Sequence[HistoryEvent]) -> list[dict[str, Any]]:
    """What each source last reported about itself, with the checkpoint that recorded it."""
    for event in reversed(events):
        if isinstance(event, CompletedEvent):
            return [
                {"checkpoint": event.checkpoint, "at": event.at, **s["status"]}
                for s in event.sources
                if isinstance(s.get("status"), dict)
            ]
    return []


def _schema_changes(events: Sequence[HistoryEvent]) -> dict[str, Any] | None:
    """The newest schema changes a source reported with a completed checkpoint, or None.

    ``{"checkpoint", "at", "changes"}``: ``changes`` one line each
    (``public.orders: column_renamed name -> title``), as the source's status said.
    """
    for event in reversed(events):
        if not isinstance(event, CompletedEvent):
            continue
        changes = [
            str(line)
            for s in event.sources
            if isinstance(s.get("status"), dict)
            for line in s["status"].get("schemaChanges") or ()
        ]
        if changes:
            return {"checkpoint": event.checkpoint, "at": event.at, "changes": changes}
    return None


def _held_back(events: Sequence[HistoryEvent]) -> list[dict[str, Any]]:
    """What the sources last said they hold back, with the checkpoint and time it was recorded.

    From the newest completed checkpoint's progress event, or a decline recorded after it
    (while a source holds everything back, no checkpoint completes). Empty: nothing held back,
    or nothing recorded.
    """
    for event in reversed(events):
        if isinstance(event, DeclineEvent) and event.held is not None:
            return [{**event.held, "checkpoint": event.checkpoint, "at": event.at}]
        if isinstance(event, CompletedEvent):
            return [
                {**s["heldBack"], "checkpoint": event.checkpoint, "at": event.at}
                for s in event.sources
                if isinstance(s.get("heldBack"), dict)
            ]
    return []


def _held_line(held: dict[str, Any]) -> str:
    """One source's held-back data in words."""
    changes, units = held.get("changes"), held.get("transactions")
    text = f"{changes} change{'' if changes == 1 else 's'} in {units} open transaction"
    text += "" if units == 1 else "s"
    since, at = held.get("sinceMs"), held.get("at")
    if isinstance(since, int | float):
        text += f" since {_utc(since / 1000)} UTC"
        held_for = held.get("heldForMs")
        seconds = held_for / 1000 if isinstance(held_for, int | float) else None
        if seconds is None and isinstance(at, int | float):
            seconds = at - since / 1000
        if seconds is not None:
            as_of = _at(at).removeprefix(" at ")
            text += f" ({describe_duration(seconds)}" + (f", as of {as_of})" if as_of else ")")
    reason, oldest = str(held.get("reason") or ""), held.get("oldest")
    if oldest and str(oldest) not in reason:
        text += f"; the oldest is {oldest}"
    return f"{text}: {reason}" if reason else text


def _start_json(event: StartEvent) -> dict[str, Any]:
    return {"attempt": event.attempt, "restored": event.restored, "at": event.at}


def _failure_json(event: FailureEvent) -> dict[str, Any]:
    return {"checkpoint": event.checkpoint, "reason": event.reason, "at": event.at}


def _status_lines(state: dict[str, Any]) -> list[tuple[str, str]]:
    lines = [("checkpoint", f"{state['checkpoint']} (query {state['queryId'] or 'unknown'})")]
    last = state["lastCompleted"]
    lines.append(("completed", "nothing yet" if last is None else f"batch {last}"))
    flight = state["inFlight"]
    lines.append(("in flight", ", ".join(f"batch {b}" for b in flight) or "nothing"))
    start = state["lastStart"]
    starts = f"{state['starts']} start(s)"
    if start is not None:
        resumed = "a new query" if start["restored"] is None else f"batch {start['restored']}"
        starts += f"; the last, attempt {start['attempt']}{_at(start['at'])}, resumed {resumed}"
    lines.append(("restarts", starts))
    failure = state["lastFailure"]
    failed = f"{state['failures']} failure(s)"
    if failure is not None:
        failed += f"; the last: {failure['reason']}{_at(failure['at'])}"
    lines.append(("failures", failed))
    for source in state["sources"]:
        lines.append(("source", _source_line(source)))
    for held in state["heldBack"]:
        lines.append(("held back", _held_line(held)))
    changed = state["schemaChanges"]
    if changed is not None:
        where = f" (batch {changed['checkpoint']}{_at(changed['at'])})"
        lines.append(("schema", "; ".join(changed["changes"]) + where))
    for name, report in state["sinks"].items():
        published = report.get("published")
        text = f"{report.get('table')}: " + (
            "nothing published" if published is None else f"published up to batch {published}"
        )
        text += f" (table version {report.get('tableVersion')})"
        text += "; pending: " + (", ".join(map(str, report.get("pending", []))) or "none")
        text += "; staged: " + (", ".join(map(str, report.get("staged", []))) or "none")
        lines.append((name, text))
    return lines


def _source_line(status: dict[str, Any]) -> str:
    """One source's health as recorded with a completed checkpoint, in words."""
    parts = [str(status.get("connector", "source"))]
    if status.get("slot") is not None:
        parts[0] += f" slot {status['slot']}"
    if status.get("lagBytes") is not None:
        behind = f"{_bytes(status['lagBytes'])} behind"
        if status.get("lagSeconds") is not None:
            behind += f" ({_seconds(float(status['lagSeconds']))})"
        parts.append(behind)
    if status.get("retainedBytes") is not None:
        parts.append(f"retains {_bytes(status['retainedBytes'])} of WAL")
    if status.get("walStatus"):
        parts.append(f"wal_status {status['walStatus']}")
    snapshot = status.get("snapshot")
    if isinstance(snapshot, dict):
        parts.append(f"snapshot: {snapshot.get('summary')}")
    return ", ".join(parts) + f" (at batch {status['checkpoint']}{_at(status.get('at'))})"


def _bytes(count: object) -> str:
    value = float(count) if isinstance(count, int | float) else 0.0
    units = iter(("B", "kB", "MB", "GB"))
    unit = next(units)
    while value >= 1024 and unit != "GB":
        value, unit = value / 1024, next(units)
    return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"


def _history(args: argparse.Namespace, out: TextIO) -> int:
    checkpoint = _checkpoint(args)
    records = HistoryLog(checkpoint).records()
    if args.json:
        for record in records:
            out.write(json.dumps(_as_json(record)) + "\n")
        return 0
    if not records:
        out.write(f"no history in {checkpoint.root.url} (spark_ckpt.install() records it)\n")
        return 0
    out.write(_HEADER + "\n")
    for record in records:
        out.write(_line(record) + "\n")
    return 0


def _as_json(record: CheckpointRecord) -> dict[str, Any]:
    body = asdict(record)
    body["transactions"] = list(record.transactions) if record.transactions else None
    body["publishLatency"] = record.publish_latency
    return body


_HEADER = (
    f"{'batch':>6}  {'transactions':<15} {'rows':>8}  {'duration':>9}  {'triggered (UTC)':<19}  "
    f"{'published':>9}  {'latency':>8}  notes"
)


def _line(record: CheckpointRecord) -> str:
    transactions = (
        f"{record.transactions[0]}-{record.transactions[1]}" if record.transactions else "-"
    )
    rows = "-" if record.rows is None else str(record.rows)
    duration = "-" if record.duration_ms is None else _seconds(record.duration_ms / 1000)
    triggered = (record.triggered_at or "-").replace("T", " ")[:19]
    if record.delta_version is not None:
        published = f"v{record.delta_version}"
    elif record.completed:
        published = "pending"
    else:
        published = "-"
    latency = "-" if record.publish_latency is None else _seconds(record.publish_latency)
    return (
        f"{record.checkpoint_id:>6}  {transactions:<15} {rows:>8}  {duration:>9}  "
        f"{triggered:<19}  {published:>9}  {latency:>8}  {_notes(record)}"
    ).rstrip()


def _notes(record: CheckpointRecord) -> str:
    notes = []
    if not record.completed:
        notes.append("not completed")
    for decline in record.declines:
        notes.append(f"declined ({decline['kind']}): {decline['reason']}")
    for failure in record.failures:
        notes.append(f"failed: {failure['reason']}" + _at(failure.get("at")))
    if record.restarts:
        notes.append(f"restarted from here x{record.restarts}")
    if record.hooks:
        notes.append(f"hooks: {', '.join(record.hooks)}")
    for savepoint in record.savepoints:
        notes.append(f"savepoint {savepoint['action']}: {savepoint['location']}")
    return "; ".join(notes)


def _at(epoch: object) -> str:
    if not isinstance(epoch, int | float):
        return ""
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    return f" at {moment:%H:%M:%S}"


def _seconds(value: float) -> str:
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"


def _savepoint_create(args: argparse.Namespace, out: TextIO) -> int:
    checkpoint = _checkpoint(args)
    target = Location(args.target, checkpoint.options)
    savepoint = create_savepoint(checkpoint, target, query_name=args.name)
    if args.json:
        out.write(json.dumps({"location": savepoint.root.url, **savepoint.to_json()}) + "\n")
    else:
        out.write(f"savepoint at batch {savepoint.checkpoint_id}: {savepoint.root.url}\n")
    return 0


def _savepoint_restore(args: argparse.Namespace, out: TextIO) -> int:
    storage = _storage(args.storage_option)
    mapping = {}
    for pair in args.map:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise UsageError(f"--map expects OLD=NEW, got {pair!r}")
        mapping[old] = new
    savepoint = Savepoint.load(args.savepoint, storage)
    checkpoint = SparkCheckpoint(args.checkpoint, storage)
    if restore_savepoint(savepoint, checkpoint, mapping):
        out.write(
            f"restored batch {savepoint.checkpoint_id} into {checkpoint.root.url}: start the "
            f"query with checkpointLocation={args.checkpoint!r}; it continues with batch "
            f"{savepoint.checkpoint_id + 1}\n"
        )
    else:
        out.write(f"{checkpoint.root.url} already holds this restore; nothing to do\n")
    return 0


def _savepoint_list(args: argparse.Namespace, out: TextIO) -> int:
    directory = Location(args.directory, _storage(args.storage_option))
    savepoints = list_savepoints(directory)
    if args.json:
        for savepoint in savepoints:
            out.write(json.dumps(_savepoint_summary(savepoint)) + "\n")
        return 0
    if not savepoints:
        out.write(f"no savepoints below {directory.url}\n")
        return 0
    out.write(f"{'created (UTC)':<19}  {'batch':>6}  {'query':<16}  location\n")
    for savepoint in savepoints:
        created = _utc(savepoint.created_at)
        query = (savepoint.query_name or savepoint.query_id)[:16]
        out.write(
            f"{created:<19}  {savepoint.checkpoint_id:>6}  {query:<16}  {savepoint.root.url}\n"
        )
    return 0


def _savepoint_summary(savepoint: Savepoint) -> dict[str, Any]:
    return {
        "location": savepoint.root.url,
        "id": savepoint.savepoint_id,
        "checkpoint": savepoint.checkpoint_id,
        "queryId": savepoint.query_id,
        "queryName": savepoint.query_name,
        "createdAt": savepoint.created_at,
        "files": len(savepoint.files),
        "bytes": savepoint.size,
    }


def _savepoint_inspect(args: argparse.Namespace, out: TextIO) -> int:
    savepoint = Savepoint.load(args.savepoint, _storage(args.storage_option))
    if args.json:
        out.write(json.dumps({"location": savepoint.root.url, **savepoint.to_json()}) + "\n")
        return 0
    lines = [
        ("savepoint", savepoint.root.url),
        ("format", f"version {savepoint.format_version}"),
        ("batch", f"{savepoint.checkpoint_id} (a restored query continues with the next)"),
        ("query", f"{savepoint.query_name or '-'} ({savepoint.query_id})"),
        ("created", f"{_utc(savepoint.created_at)} UTC from {savepoint.taken_from}"),
        ("files", f"{len(savepoint.files)} ({savepoint.size} bytes)"),
    ]
    for index, offset in enumerate(savepoint.source_offsets):
        lines.append((f"source {index}", offset))
    for name, description in sorted(savepoint.components.items()):
        text = f"{description.get('table')} up to batch {description.get('published')}"
        if savepoint.delta_version is not None:
            text += f" (Delta version {savepoint.delta_version})"
        lines.append((name, text))
    for key, value in lines:
        out.write(f"{key:<14}{value}\n")
    return 0


def _utc(epoch: float) -> str:
    return f"{datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc):%Y-%m-%d %H:%M:%S}"


if __name__ == "__main__":  # python -m spark_ckpt.cli
    sys.exit(main())
