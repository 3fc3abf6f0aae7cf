"""The ``debezium-json`` connector's own options."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from spark_ckpt.errors import InvalidOptionError
from spark_ckpt.model.option_types import Choice, Parsed, Text
from spark_ckpt.model.options import OptionReader, OptionSpec, declared, read_declared
from spark_ckpt.model.uris import check_uri

from ..options import ConnectorOptions

FileOrder = Literal["name", "natural"]
"""How file names order the log: ``name`` compares them as strings (``b10`` before ``b9``),
``natural`` compares runs of digits as numbers (``b9`` before ``b10``)."""
FILE_ORDERS: tuple[FileOrder, ...] = ("name", "natural")
Resnapshot = Literal["fail", "accept"]
RESNAPSHOT: tuple[Resnapshot, ...] = ("fail", "accept")

__all__ = ["DebeziumOptions", "parse_key_columns"]

_KEY_COLUMNS_FORM = (
    "'<table>:<column>[,<column>...]' entries separated by ';', each table named as the "
    "change's table column names it (schema.table or db.table), at most once: "
    "'public.orders:id;public.order_items:order_id,line'"
)
KeyColumns = tuple[tuple[str, tuple[str, ...]], ...]


def parse_key_columns(value: str | None) -> KeyColumns:
    """Read option ``keyColumns`` (driver, once per query start).

    Raises
    ------
    InvalidOptionError
        An entry without a table or a column, or a table named twice.
    """
    if value is None:
        return ()
    try:
        return _key_columns(value)
    except ValueError as e:
        raise InvalidOptionError("keyColumns", value, _KEY_COLUMNS_FORM) from e


def _key_columns(value: str) -> KeyColumns:
    out: dict[str, tuple[str, ...]] = {}
    for entry in value.split(";"):
        if not entry.strip():
            continue
        table, colon, columns = entry.partition(":")
        names = tuple(c.strip() for c in columns.split(","))
        if not colon or not table.strip() or not all(names) or table.strip() in out:
            raise ValueError(value)
        out[table.strip()] = names
    return tuple(out.items())


PATH: OptionSpec[str] = OptionSpec(
    "path",
    "the change-log directory of `*.jsonl` files, a local path or an object-store URI (or "
    "`.load(path)`)",
    Text(),
    required="the directory of *.jsonl change files (.option('path', '/data/changes') or "
    ".load('/data/changes'))",
)
KEY_COLUMNS: OptionSpec[KeyColumns] = OptionSpec(
    "keyColumns",
    "the key of a change whose line carries no `key` (object-store sinks keep record values "
    "only), per table, in the syntax of Debezium's `message.key.columns`: "
    "`public.orders:id;public.order_items:order_id,line`. The `key` column is then the image's "
    "values of those columns (`after`, or `before` for a delete). Mirror mode needs a key for "
    "every change and names this option when one is missing",
    Parsed(_key_columns, _KEY_COLUMNS_FORM),
    default=(),
    default_note="none",
)
RESNAPSHOT_OPTION: OptionSpec[Resnapshot] = OptionSpec(
    "resnapshot",
    "a second initial snapshot in the log (Debezium lost its offsets) stops the query with "
    "`RepeatedSnapshotError`; `accept` delivers it as one unit like the first",
    Choice(RESNAPSHOT),
    default="fail",
)
FILE_ORDER: OptionSpec[FileOrder] = OptionSpec(
    "fileOrder",
    "`name` reads files in file-name order (`b10` before `b9`); `natural` compares runs of "
    "digits as numbers (`b9` before `b10`), for producers that number files without zero "
    "padding. Fixed for a checkpoint location",
    Choice(FILE_ORDERS),
    default="name",
)


@dataclass(frozen=True)
class DebeziumOptions(ConnectorOptions):
    """Options of ``connector=debezium-json``.

    Attributes
    ----------
    path
        The change-log directory: a local path or an object-store URI.
    file_order
        How file names order the log (``name`` or ``natural``).
    resnapshot
        What a repeated initial snapshot gets: ``fail`` (a
        :class:`~spark_ckpt.errors.RepeatedSnapshotError`) or ``accept`` (delivered as a unit
        like the first).
    key_columns
        Per table, the columns whose values are the key of a change whose line carries no
        ``key`` (option ``keyColumns``, in the syntax of Debezium's ``message.key.columns``:
        ``public.orders:id;public.order_items:order_id,line``).
    """

    OPTIONS: ClassVar[tuple[OptionSpec[Any], ...]] = (
        PATH,
        KEY_COLUMNS,
        RESNAPSHOT_OPTION,
        FILE_ORDER,
    )
    # Spark runs each partition of a Python source as a task costing about 35 ms of wall time on
    # two cores beyond its rows (bench: 20 partitions of 2,000 changes take 0.9 s, one of
    # 40,000 takes 0.23 s); decoding 200k lines takes about 0.4 s, so the task's own cost
    # stays under a tenth. The 114 MB bench log runs 0.3 s faster into noop than at 50k.
    CHANGES_PER_PARTITION: ClassVar[int] = 200_000

    path: str = declared(PATH)
    file_order: FileOrder = declared(FILE_ORDER)
    resnapshot: Resnapshot = declared(RESNAPSHOT_OPTION)
    key_columns: tuple[tuple[str, tuple[str, ...]], ...] = declared(KEY_COLUMNS)

    @classmethod
    def parse(cls, options: OptionReader) -> DebeziumOptions:
        """Read ``path``, ``fileOrder``, ``resnapshot`` and ``keyColumns`` (driver, per start)."""
        parsed = cls(**read_declared(cls, options))
        check_uri(parsed.path)  # refuses a scheme no store supports, naming it
        return parsed
