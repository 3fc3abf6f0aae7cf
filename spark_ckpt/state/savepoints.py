"""Savepoints: a user-owned, self-contained, relocatable copy of a query's state at checkpoint N.

Checkpoints belong to the system: Spark and spark-ckpt write, purge and rewrite them. A savepoint
(Flink's FLINK-11159 distinction) belongs to the user: it is taken on request at a checkpoint N
that is complete (``commits/N``) and published (every sink's output up to N is in its table), is
never removed by retention, and can be restored into a new checkpoint location so that the
query continues exactly after N: into the same table, or through a path mapping into a relocated
(copied) or a new one.

Layout of a savepoint directory (format ``spark-ckpt-savepoint``, version :data:`FORMAT_VERSION`;
docs/savepoints.md documents it)::

    savepoint-<query id prefix>-<N>-<token>/
        _savepoint.json    what it is (written last: a directory without it is incomplete)
        checkpoint/        the checkpoint location's files as of N, paths relative to it

``checkpoint/`` holds Spark's ``metadata``, ``offsets/0..N``, ``commits/0..N``, ``sources/`` and
the state-store files up to version N + 1; spark-ckpt's hook records up to N and the history up
to N (one segment); what each *participant* keeps (the ``delta-2pc`` sink: the table it writes).
Nothing refers to the savepoint's own location, so it can be moved or copied as a whole.

Components take part through the entry-point group :data:`PARTICIPANT_GROUP`
(:class:`SavepointParticipant`), so this module imports no source or sink. Pure Python over the
storage layer; runs on the driver or in the ``spark-ckpt`` command, never on executors.
"""

from __future__ import annotations

import abc
import json
import logging
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from spark_ckpt.errors import SavepointError, SavepointRestoreError, StorageError
from spark_ckpt.model.events import HistoryEvent, SavepointEvent, StartEvent
from spark_ckpt.state.checkpoint_dir import SparkCheckpoint
from spark_ckpt.state.history import HistoryLog, fold
from spark_ckpt.state.restore import logged_offsets
from spark_ckpt.state.storage import Location, StorageOptions
from spark_ckpt.state.version import installed_version

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "PARTICIPANT_GROUP",
    "Savepoint",
    "SavepointFile",
    "SavepointParticipant",
    "create_savepoint",
    "list_savepoints",
    "load_participants",
    "map_path",
    "restore_savepoint",
]

FORMAT = "spark-ckpt-savepoint"
FORMAT_VERSION = 1
"""The savepoint format this code writes; it reads this version and older ones."""
DESCRIPTOR = "_savepoint.json"
CHECKPOINT_DIR = "checkpoint"
PARTICIPANT_GROUP = "spark_ckpt.savepoint_participants"
"""Entry-point group of :class:`SavepointParticipant` objects, keyed by component name."""
RESTORED_MARKER = ("spark_ckpt", "restored-from.json")
"""Written into a checkpoint location once a savepoint was restored into it completely."""
RESTORING_MARKER = ("spark_ckpt", "restoring-from.json")
"""Written before a restore copies anything: a crashed restore of the same savepoint may redo."""

_log = logging.getLogger(__name__)
_VERSIONED = re.compile(r"^(\d+)(?:[._].*)?$")  # state-store files: 12.delta, 12.zip, 12_<id>.zip


class SavepointParticipant(abc.ABC):
    """A component whose state lives in the checkpoint location beside Spark's.

    Registered under :data:`PARTICIPANT_GROUP`; :attr:`directory` names its top-level folder in
    the checkpoint location. Every method runs on the driver (or in the CLI), once per savepoint
    or restore.
    """

    directory: str = ""
    """Its folder in the checkpoint location (``delta_2pc``)."""

    @abc.abstractmethod
    def describe(self, checkpoint: SparkCheckpoint) -> dict[str, Any] | None:
        """Its state in ``checkpoint`` as JSON (None: it has none there).

        The key ``published`` (an int or None) says up to which batch its output is visible;
        a savepoint is taken at a batch no newer than that.
        """

    def keeps(self, relative: str, checkpoint_id: int) -> bool:
        """Whether a savepoint at ``checkpoint_id`` copies ``relative`` (under :attr:`directory`).

        By default everything.
        """
        return True

    def check_restore(
        self,
        description: Mapping[str, Any],
        savepoint: Savepoint,
        mapping: Mapping[str, str],
        storage: StorageOptions,
    ) -> None:
        """Refuse a restore that would skip or repeat data (default: accept every restore).

        Raises :class:`~spark_ckpt.errors.SavepointRestoreError` with the choices left.
        """
        return None

    def relocate(
        self,
        checkpoint: SparkCheckpoint,
        description: Mapping[str, Any],
        mapping: Mapping[str, str],
    ) -> None:
        """Point its restored state in ``checkpoint`` at the mapped locations (default: none)."""
        return None


def load_participants() -> dict[str, SavepointParticipant]:
    """The installed participants by component name."""
    found = {}
    for entry in entry_points(group=PARTICIPANT_GROUP):
        participant = entry.load()
        found[entry.name] = participant() if isinstance(participant, type) else participant
    return found


def map_path(path: str, mapping: Mapping[str, str]) -> str:
    """``path`` with the longest matching prefix in ``mapping`` replaced (else unchanged).

    Prefixes match whole path components, in the form written or the canonical one
    (``s3a://b/t`` and ``s3://b/t`` are the same table).
    """
    best: tuple[int, str] | None = None
    for old, new in mapping.items():
        for form, candidate in ((old, path), (_canonical(old), _canonical(path))):
            base = form.rstrip("/")
            matches = candidate == base or candidate.startswith(base + "/")
            if matches and (best is None or len(base) > best[0]):
                best = (len(base), new.rstrip("/") + candidate[len(base) :])
    return path if best is None else best[1]


def _canonical(path: str) -> str:
    try:
        return Location(path).url
    except StorageError:
        return path


@dataclass(frozen=True)
class SavepointFile:
    """One file of a savepoint: its path below ``checkpoint/`` and its size in bytes."""

    path: str
    size: int


@dataclass(frozen=True)
class Savepoint:
    """A savepoint as its ``_savepoint.json`` describes it.

    Attributes
    ----------
    location
        Where it is now (not stored: a savepoint can be moved).
    savepoint_id
        Its name when taken (``savepoint-<query id prefix>-<N>-<token>``).
    checkpoint_id
        N: the query continues with batch N + 1 when restored.
    query_id
        The query's id (Spark's ``metadata``; the Delta ``txn`` appId of its sinks).
    query_name
        The query's name, when known.
    created_at
        When it was taken (seconds since the epoch).
    taken_from
        The checkpoint location it was copied from (for people; never read back).
    source_offsets
        The end offsets of checkpoint N, one JSON text per source, as Spark logged them.
    components
        Each participant's description (``delta-2pc``: ``table``, ``published``).
    files
        Every file below ``checkpoint/``, with its size (checked on restore).
    delta_version
        The Delta table version checkpoint N was published as, when the history knows it.
    storage
        How :attr:`location` is reached (never stored: may hold credentials).
    """

    location: str
    savepoint_id: str
    checkpoint_id: int
    query_id: str
    query_name: str | None
    created_at: float
    taken_from: str
    source_offsets: tuple[str, ...]
    components: Mapping[str, Mapping[str, Any]]
    files: tuple[SavepointFile, ...]
    delta_version: int | None = None
    format_version: int = FORMAT_VERSION
    storage: StorageOptions = field(default=StorageOptions(), compare=False, repr=False)

    @property
    def root(self) -> Location:
        """The savepoint directory."""
        return Location(self.location, self.storage)

    @property
    def size(self) -> int:
        """Bytes in its files."""
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        """The stored ``_savepoint.json`` (stable key order)."""
        return {
            "format": FORMAT,
            "version": self.format_version,
            "id": self.savepoint_id,
            "checkpoint": self.checkpoint_id,
            "queryId": self.query_id,
            "queryName": self.query_name,
            "createdAt": self.created_at,
            "createdBy": f"spark-ckpt {_version()}",
            "takenFrom": self.taken_from,
            "sourceOffsets": list(self.source_offsets),
            "components": {k: dict(v) for k, v in sorted(self.components.items())},
            "deltaVersion": self.delta_version,
            "files": [{"path": f.path, "size": f.size} for f in self.files],
        }

    @classmethod
    def load(cls, location: str | Location, storage: StorageOptions | None = None) -> Savepoint:
        """Read the savepoint at ``location`` (a savepoint directory).

        Raises
        ------
        SavepointError
            When there is no savepoint there, it is incomplete, or its format is unknown.
        """
        if isinstance(location, Location):
            root = location if storage is None else Location(location.uri, storage)
        else:
            root = Location(location, storage or StorageOptions())
        data = root.child(DESCRIPTOR).read_bytes()
        if data is None:
            hint = (
                "it is incomplete (taking it failed or is still running): take a new one"
                if root.list()
                else "the location is empty or does not exist"
            )
            raise SavepointError(f"no savepoint at {root.url}: {DESCRIPTOR} is missing; {hint}")
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT:
                raise ValueError(f"format {body.get('format')!r}, not {FORMAT!r}")
            version = int(body["version"])
            if version > FORMAT_VERSION:
                raise ValueError(
                    f"format version {version}, newer than {FORMAT_VERSION} (the newest this "
                    f"spark-ckpt reads): upgrade spark-ckpt"
                )
            return cls(
                root.uri,
                str(body["id"]),
                int(body["checkpoint"]),
                str(body["queryId"]),
                body.get("queryName"),
                float(body["createdAt"]),
                str(body.get("takenFrom", "")),
                tuple(str(o) for o in body.get("sourceOffsets", [])),
                {str(k): dict(v) for k, v in body.get("components", {}).items()},
                tuple(SavepointFile(str(f["path"]), int(f["size"])) for f in body["files"]),
                body.get("deltaVersion"),
                version,
                root.options,
            )
        except (ValueError, KeyError, TypeError) as e:
            raise SavepointError(f"cannot read the savepoint at {root.url}: {e}") from e


def _version() -> str:
    return installed_version()


# -- taking a savepoint ---------------------------------------------------------------------


def _spark_keeps(parts: list[str], checkpoint_id: int) -> bool:
    """Whether a savepoint at N copies the file ``parts`` of Spark's part of the location."""
    top, name = parts[0], parts[-1]
    if top in ("offsets", "commits"):
        return len(parts) == 2 and name.isdigit() and int(name) <= checkpoint_id
    if top == "state":
        # State store version V holds the state after batch V - 1: N needs versions up to N + 1.
        match = _VERSIONED.match(name)
        return match is None or int(match.group(1)) <= checkpoint_id + 1
    return True  # metadata, sources/, and files a newer Spark may add


def _own_keeps(parts: list[str], checkpoint_id: int) -> bool:
    """Whether a savepoint copies one of spark-ckpt's own files (``spark_ckpt/...``)."""
    if len(parts) == 3 and parts[1] == "hooks" and parts[2].endswith(".json"):
        stem = parts[2].removesuffix(".json")
        return stem.isdigit() and int(stem) <= checkpoint_id
    return False  # history is exported separately; restore markers describe the location


def _chosen_files(
    checkpoint: SparkCheckpoint,
    checkpoint_id: int,
    participants: Mapping[str, SavepointParticipant],
) -> list[str]:
    owners = {p.directory: p for p in participants.values() if p.directory}
    chosen = []
    for entry in checkpoint.root.list(recursive=True):
        parts = entry.name.split("/")
        if any(p.startswith(".") for p in parts) or parts[-1].endswith((".crc", ".tmp")):
            continue  # Hadoop's checksum and temporary files
        top = parts[0]
        if top == "spark_ckpt":
            keep = _own_keeps(parts, checkpoint_id)
        elif top in owners:
            keep = owners[top].keeps("/".join(parts[1:]), checkpoint_id)
        else:
            keep = _spark_keeps(parts, checkpoint_id)
        if keep:
            chosen.append(entry.name)
    return chosen


def _history_upto(checkpoint: SparkCheckpoint, checkpoint_id: int) -> list[HistoryEvent]:
    """The history events about checkpoints up to N (and the starts that led there)."""
    kept: list[HistoryEvent] = []
    for event in HistoryLog(checkpoint).events():
        about = event.restored if isinstance(event, StartEvent) else event.checkpoint
        if about is None or about <= checkpoint_id:
            kept.append(event)
    return kept


def _published_upto(
    checkpoint: SparkCheckpoint, participants: Mapping[str, SavepointParticipant]
) -> tuple[int, dict[str, dict[str, Any]]]:
    latest = checkpoint.latest_committed()
    if latest is None:
        raise SavepointError(
            f"no checkpoint of {checkpoint.location!r} is complete yet: a savepoint needs a "
            f"completed batch; take it once the query has completed one"
        )
    chosen = latest
    components: dict[str, dict[str, Any]] = {}
    for name, participant in sorted(participants.items()):
        description = participant.describe(checkpoint)
        if description is None:
            continue
        published = description.get("published")
        if published is None:
            raise SavepointError(
                f"{name} of {checkpoint.location!r} has published nothing yet: a savepoint is "
                f"taken at a published batch; take it once the first batch is published"
            )
        chosen = min(chosen, int(published))
        components[name] = description
    return chosen, components


def create_savepoint(
    checkpoint: SparkCheckpoint,
    target: Location,
    *,
    query_name: str | None = None,
    participants: Mapping[str, SavepointParticipant] | None = None,
) -> Savepoint:
    """Take a savepoint of ``checkpoint`` in a new directory below ``target`` (driver or CLI).

    N is the newest batch that is complete and published by every participant. Works while
    the query runs: files of later batches are left out, and files Spark writes once are not
    changed afterwards. Nothing is deleted from the checkpoint location.

    Raises
    ------
    SavepointError
        When no batch is complete and published yet, or a file N needs vanished meanwhile.
    """
    participants = load_participants() if participants is None else participants
    query_id = checkpoint.query_id()
    checkpoint_id, components = _published_upto(checkpoint, participants)
    for description in components.values():
        description["published"] = checkpoint_id  # what the savepoint holds, not the table now
    savepoint_id = f"savepoint-{query_id[:6]}-{checkpoint_id}-{uuid.uuid4().hex[:8]}"
    root = target.child(savepoint_id)
    copied: list[SavepointFile] = []
    for relative in _chosen_files(checkpoint, checkpoint_id, participants):
        size = checkpoint.child(relative).copy_to(root.child(CHECKPOINT_DIR, relative))
        if size is None:
            needed = relative in (f"offsets/{checkpoint_id}", f"commits/{checkpoint_id}")
            if needed or relative == "metadata":
                raise SavepointError(
                    f"{checkpoint.child(relative).url} vanished while the savepoint was taken"
                )
            continue  # Spark purged an old log entry meanwhile; it does not need it either
        copied.append(SavepointFile(relative, size))
    events = _history_upto(checkpoint, checkpoint_id)
    saved = SparkCheckpoint(root.child(CHECKPOINT_DIR))
    HistoryLog(saved).write_segment(events)
    for entry in saved.child("spark_ckpt", "history").list(recursive=True):
        copied.append(SavepointFile(f"spark_ckpt/history/{entry.name}", entry.size))
    delta_version = next(
        (r.delta_version for r in fold(events) if r.checkpoint_id == checkpoint_id), None
    )
    offsets = logged_offsets(checkpoint, checkpoint_id)
    savepoint = Savepoint(
        root.uri,
        savepoint_id,
        checkpoint_id,
        query_id,
        query_name,
        time.time(),
        checkpoint.root.url,
        offsets,
        components,
        tuple(sorted(copied, key=lambda f: f.path)),
        delta_version,
        storage=target.options,
    )
    body = json.dumps(savepoint.to_json(), indent=1, sort_keys=False).encode()
    root.child(DESCRIPTOR).write_bytes(body)  # last: now it is a savepoint
    HistoryLog(checkpoint).append(SavepointEvent(checkpoint_id, root.url, "created"))
    _log.info("savepoint of %s at checkpoint %d: %s", checkpoint.location, checkpoint_id, root.url)
    return savepoint


def list_savepoints(directory: Location) -> list[Savepoint]:
    """The complete savepoints directly below ``directory``, oldest first.

    A directory that is itself a savepoint lists as itself. Incomplete ones are left out.
    """
    if directory.child(DESCRIPTOR).exists():
        return [Savepoint.load(directory)]
    found = []
    for entry in directory.list(recursive=True):
        head, _, rest = entry.name.partition("/")
        if rest == DESCRIPTOR:
            found.append(Savepoint.load(directory.child(head)))
    return sorted(found, key=lambda s: s.created_at)


# -- restoring ----------------------------------------------------------------------------


def _marker(checkpoint: SparkCheckpoint, parts: tuple[str, ...]) -> str | None:
    data = checkpoint.child(*parts).read_bytes()
    if data is None:
        return None
    try:
        return str(json.loads(data)["id"])
    except (ValueError, KeyError, TypeError):
        return None


def restore_savepoint(
    savepoint: Savepoint,
    checkpoint: SparkCheckpoint,
    mapping: Mapping[str, str] | None = None,
    *,
    participants: Mapping[str, SavepointParticipant] | None = None,
) -> bool:
    """Make ``checkpoint`` (a new location) continue ``savepoint``'s query after its batch N.

    Runs on the driver before the restored query first starts (or in ``spark-ckpt savepoint
    restore``). ``mapping`` maps old path prefixes to new ones, for tables that moved. Nothing
    is copied when a participant refuses. Restoring the same savepoint into the same location
    again is a no-op (returns False), so a restarted driver script can pass it every time.

    Raises
    ------
    SavepointRestoreError
        The location holds another query's checkpoint, or a participant refuses (a table that
        moved past N would have batches skipped or repeated).
    SavepointError
        A file the savepoint lists is missing or has the wrong size.
    """
    mapping = dict(mapping or {})
    participants = load_participants() if participants is None else participants
    if _marker(checkpoint, RESTORED_MARKER) == savepoint.savepoint_id:
        return False
    if _marker(checkpoint, RESTORING_MARKER) == savepoint.savepoint_id:
        _log.warning("an earlier restore into %s stopped half-way: redoing it", checkpoint.location)
        checkpoint.root.delete_tree()
    elif checkpoint.root.list():
        raise SavepointRestoreError(
            f"cannot restore {savepoint.location} into {checkpoint.location!r}: the location "
            f"is not empty (it holds another checkpoint). Restore into a new checkpoint location"
        )
    for name, description in sorted(savepoint.components.items()):
        participant = participants.get(name)
        if participant is None:
            raise SavepointRestoreError(
                f"the savepoint at {savepoint.location} has state of {name!r}, which is not "
                f"installed here: install the package that provides it"
            )
        participant.check_restore(description, savepoint, mapping, checkpoint.options)
    source = savepoint.root.child(CHECKPOINT_DIR)
    for listed in savepoint.files:
        info = source.child(listed.path).info()
        if info.size != listed.size:
            found = "missing" if info.size is None else f"{info.size} bytes"
            raise SavepointError(
                f"the savepoint at {savepoint.location} is damaged: {listed.path} should have "
                f"{listed.size} bytes but is {found}; restore another savepoint"
            )
    marker = json.dumps({"id": savepoint.savepoint_id, "location": savepoint.location}).encode()
    checkpoint.child(*RESTORING_MARKER).write_bytes(marker)
    for listed in savepoint.files:
        source.child(listed.path).copy_to(checkpoint.child(listed.path))
    for name, description in sorted(savepoint.components.items()):
        participants[name].relocate(checkpoint, description, mapping)
    HistoryLog(checkpoint).append(
        SavepointEvent(savepoint.checkpoint_id, savepoint.root.url, "restored")
    )
    checkpoint.child(*RESTORED_MARKER).write_bytes(marker)  # last: the restore is complete
    checkpoint.child(*RESTORING_MARKER).delete()
    _log.info(
        "restored savepoint %s (checkpoint %d) into %s",
        savepoint.location,
        savepoint.checkpoint_id,
        checkpoint.location,
    )
    return True
