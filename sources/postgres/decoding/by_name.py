"""The output plugin the option ``plugin`` names (driver and executors)."""

from __future__ import annotations

from spark_ckpt.errors import InvalidOptionError

from ..plugins import PLUGINS
from .pgoutput import PGOUTPUT
from .plugin import OutputPlugin
from .wal2json import WAL2JSON

__all__ = ["output_plugin"]

_BY_NAME: dict[str, OutputPlugin] = {WAL2JSON.name: WAL2JSON, PGOUTPUT.name: PGOUTPUT}


def output_plugin(name: str) -> OutputPlugin:
    """The plugin called ``name`` (one of :data:`~..plugins.PLUGINS`)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise InvalidOptionError("plugin", name, "one of: " + ", ".join(PLUGINS)) from None
